package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	runpkg "github.com/orrery-dev/orrery/internal/run"
)

// BenchmarkParkedSleeps parks ORRERY_BENCH_PARKED steps (default 100,000)
// sleeping far ahead (a year), then 2,000 runs whose first step sleeps
// until one instant 5 s ahead and whose second is a no-op on a pool of
// 200 workers. It reports the time to park the far ones (runs written in
// batches of 1,000, each root parked in its run's transaction), and, for
// the 2,000 that wake together, the lateness of their wakes (the next
// step's start after the instant: p50, p99, max) and how many a second
// woke: the due index keeps the far sleepers out of every pass
// (docs/parked-steps.md, "Cost"). ORRERY_BENCH_PARKED=0 is the baseline.
func BenchmarkParkedSleeps(b *testing.B) {
	for range b.N {
		pool := freshDB(b)
		eng := startEngine(b, pool, 200)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		jobs, err := job.New(ctx, pool, nil)
		if err != nil {
			b.Fatal(err)
		}
		never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}
		create := func(name string, spec dag.JobSpec) *job.Job {
			j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: spec}, "")
			if err != nil {
				b.Fatal(err)
			}
			return j
		}
		far := create("far", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
			Steps: []dag.Step{{Name: "nap", Sleep: &dag.Sleep{For: 365 * 24 * time.Hour}}}})
		soon := create("soon", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
			Params: map[string]dag.Param{"at": {Type: "string"}},
			Steps: []dag.Step{
				{Name: "nap", Sleep: &dag.Sleep{Until: "${{ params.at }}"}},
				{Name: "go", Needs: []string{"nap"}, Run: dag.Executor{Handler: "noop"}},
			}})
		parked := envInt(b, "ORRERY_BENCH_PARKED", 100_000)
		start := time.Now()
		parkRuns(b, pool, eng, far, parked, nil)
		parkTime := time.Since(start)
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM parked_steps").Scan(&n); err != nil || n != parked {
			b.Fatalf("%d parked of %d (%v)", n, parked, err)
		}
		const waking = 2000
		var dbNow time.Time
		if err := pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow); err != nil {
			b.Fatal(err)
		}
		until := dbNow.Add(5 * time.Second).UTC().Truncate(time.Second)
		parkRuns(b, pool, eng, soon, waking, dag.Payload(fmt.Sprintf(`{"at": %q}`, until.Format(time.RFC3339))))
		deadline := time.Now().Add(2 * time.Minute)
		for eng.handled.Load() < waking && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		eng.check(b)
		if got := eng.handled.Load(); got != waking {
			b.Fatalf("%d of %d woke and ran their next step", got, waking)
		}
		var p50, p99, maxLate, spread float64
		if err := pool.QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s), percentile_cont(0.99) WITHIN GROUP (ORDER BY s), max(s), max(s) - min(s)
			FROM (SELECT extract(epoch FROM a.started_at - $1::timestamptz) AS s
			      FROM tasks t JOIN attempts a ON a.task_id = t.id AND a.number = 1 JOIN runs r ON r.id = t.run_id
			      WHERE r.job_id = $2 AND t.step = 'go') AS x`, until, soon.ID).Scan(&p50, &p99, &maxLate, &spread); err != nil {
			b.Fatal(err)
		}
		var wakeP50, wakeMax float64 // the naps' ends alone, after the instant
		if err := pool.QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s), max(s)
			FROM (SELECT extract(epoch FROM a.finished_at - $1::timestamptz) AS s
			      FROM tasks t JOIN attempts a ON a.task_id = t.id AND a.number = 1 JOIN runs r ON r.id = t.run_id
			      WHERE r.job_id = $2 AND t.step = 'nap') AS x`, until, soon.ID).Scan(&wakeP50, &wakeMax); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(wakeP50*1000, "p50-woken-ms")
		b.ReportMetric(wakeMax*1000, "max-woken-ms")
		b.ReportMetric(float64(parked)/parkTime.Seconds(), "parks/s")
		b.ReportMetric(p50*1000, "p50-late-ms")
		b.ReportMetric(p99*1000, "p99-late-ms")
		b.ReportMetric(maxLate*1000, "max-late-ms")
		b.ReportMetric(waking/max(spread, 0.001), "wakes/s")
	}
}

// parkRuns writes n runs of j (its roots released in their runs'
// transactions, 1,000 runs a transaction): each parks its root when it
// sleeps or waits.
func parkRuns(b *testing.B, pool *pgxpool.Pool, eng *engine, j *job.Job, n int, params dag.Payload) {
	b.Helper()
	ctx := context.Background()
	a := &runpkg.Applier{Dispatcher: eng.dispatcher}
	at := time.Now()
	defer func() { b.Logf("%d runs parked their root in %s", n, time.Since(at).Round(time.Millisecond)) }()
	for done := 0; done < n; done += 1000 {
		batch := make([]runpkg.New, min(1000, n-done))
		for i := range batch {
			batch[i] = runpkg.New{Job: runpkg.JobRef{ID: j.ID, Tenant: j.Tenant, Version: j.Version, Shard: j.Shard, Spec: &j.Spec},
				At: at.Add(time.Duration(done+i) * time.Microsecond), Trigger: lifecycle.TriggerManual, Status: lifecycle.RunPending, Params: params}
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := a.Insert(ctx, tx, batch, nil, nil)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}
