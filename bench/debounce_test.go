package bench

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	orun "github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// BenchmarkDebounce: a job's debounce (docs/flow-control.md, "Debounce").
// The trigger's cost (p50 of ORRERY_BENCH_TRIGGERS, default 500, one
// after the other through run.Service): of a job without a debounce (a
// run written), of a debounced job where each trigger is a new key (a
// run written, queued), and where every trigger joins one key's run (an
// update, no run). Then, with 10,000 debounced runs waiting (not due),
// the scheduler pass's look for due ones (HasDueDebounces, p50 of 200),
// and the start of 100 made due, in one transaction (FireDebounced: each
// pending, its first step released to its queue).
func BenchmarkDebounce(b *testing.B) {
	for range b.N {
		debounce(b, envInt(b, "ORRERY_BENCH_TRIGGERS", 500))
	}
}

func debounce(b *testing.B, triggers int) {
	pool := freshDB(b)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}
	params := map[string]dag.Param{"k": {Type: "string"}}
	step := []dag.Step{{Name: "work", Run: dag.Executor{Handler: "noop"}}}
	for name, d := range map[string]*dag.Debounce{"plain": nil, "debounced": {Key: "${{ params.k }}", Period: dag.Duration{Duration: time.Hour}}} {
		if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: dag.JobSpec{
			Schedule: never, Overlap: dag.OverlapAllow, Params: params, Debounce: d, Steps: step}}, ""); err != nil {
			b.Fatal(err)
		}
	}
	d, err := dispatch.New()
	if err != nil {
		b.Fatal(err)
	}
	runs := orun.NewService(pool, jobs, d)
	p50 := func(name string, key func(i int) string) float64 {
		lat := make([]time.Duration, triggers)
		for i := range triggers {
			t0 := time.Now()
			if _, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Name: name}, orun.TriggerOptions{ParamTexts: map[string]string{"k": key(i)}}); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(t0)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return float64(lat[len(lat)/2].Microseconds()) / 1000
	}
	plain := p50("plain", func(i int) string { return fmt.Sprint(i) })
	fresh := p50("debounced", func(i int) string { return fmt.Sprint("new-", i) })
	joined := p50("debounced", func(int) string { return "one" })
	b.ReportMetric(plain, "plain-trigger-p50-ms")
	b.ReportMetric(fresh, "new-key-trigger-p50-ms")
	b.ReportMetric(joined, "joining-trigger-p50-ms")
	if n := queryCount(b, pool, "SELECT count(*) FROM runs WHERE debounce_key = 'one'"); n != 1 {
		b.Fatalf("%d runs of the joined key", n)
	}

	// 10,000 debounced runs waiting an hour (as the triggers above wrote
	// theirs), then the due look and a start of 100.
	if _, err := pool.Exec(ctx, `INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at,
		    debounce_key, debounce_at, debounce_count)
		SELECT gen_random_uuid(), $1, j.id, j.version, j.shard, now() - interval '1 day' - i * interval '1 ms', 'manual', 'queued', now(), 'seed-' || i, now() + interval '1 hour', 1
		FROM jobs AS j, generate_series(1, 10000) AS i WHERE j.name = 'debounced'`, job.DefaultTenant); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE runs"); err != nil {
		b.Fatal(err)
	}
	shards := make([]int32, jobs.Shards())
	for i := range shards {
		shards[i] = int32(i)
	}
	look := make([]time.Duration, 200)
	for i := range look {
		t0 := time.Now()
		if due, err := store.New(pool).HasDueDebounces(ctx, shards); err != nil || due {
			b.Fatalf("due %v (%v)", due, err)
		}
		look[i] = time.Since(t0)
	}
	sort.Slice(look, func(i, j int) bool { return look[i] < look[j] })
	b.ReportMetric(float64(look[len(look)/2].Microseconds())/1000, "due-look-p50-ms")
	if _, err := pool.Exec(ctx, `UPDATE runs SET debounce_at = now() WHERE id IN (
		SELECT id FROM runs WHERE debounce_key LIKE 'new-%' AND debounce_at IS NOT NULL ORDER BY id LIMIT 100)`); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	var fired []uuid.UUID
	err = store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		ids, err := (&orun.Applier{Dispatcher: d}).FireDebounced(ctx, tx, shards, 100)
		fired = ids
		return err
	})
	if err != nil || len(fired) != 100 {
		b.Fatalf("fired %d (%v)", len(fired), err)
	}
	b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "start-100-ms")
	if n := queryCount(b, pool, "SELECT count(*) FROM tasks AS t JOIN runs AS r ON r.id = t.run_id WHERE r.debounce_key IS NOT NULL AND r.status = 'pending' AND t.status = 'queued'"); n != 100 {
		b.Fatalf("%d first steps released for the 100 started", n)
	}
}

// queryCount runs a query returning one count.
func queryCount(b *testing.B, pool *pgxpool.Pool, sql string) int {
	b.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
