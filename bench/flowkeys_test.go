package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
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

// BenchmarkStepKeys: step-level concurrency keys (docs/flow-control.md)
// with 100 to 100,000 keys at their limit (1), each with a holder running
// (in queue kq) and a task held on it (in queue q), beside 1,000 tasks
// without keys waiting in q, served by ten workers of 50 slots. Reported
// per scale, each the median of ORRERY_BENCH_PASSES (default 20): the
// admission pass of q (it admits the 1,000: held tasks are not read), a
// release into a key at its limit (a trigger of the keyed job: the task
// is held), a holder's end (a cancel of its run, which releases the task
// held on its key), the reaper's look over 100 held keys, and a run's
// read (runs get) beside the N running tasks. Then
// fairness: one key with 10,000 tasks held (limit 2) and 50 other keys
// released after them: how many of the 50 one admission pass starts.
func BenchmarkStepKeys(b *testing.B) {
	for _, keys := range []int{100, 1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			for range b.N {
				stepKeys(b, keys, envInt(b, "ORRERY_BENCH_PASSES", 20))
			}
		})
	}
	b.Run("fairness", func(b *testing.B) {
		for range b.N {
			stepKeysFairness(b)
		}
	})
}

// keyedJob creates the keyed job (its step keyed by params.k, limit
// limit, in queue q) and returns its id and the run service.
func keyedJob(b *testing.B, pool *pgxpool.Pool, limit int) (uuid.UUID, *orun.Service, *dispatch.Dispatcher) {
	b.Helper()
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "keyed"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}, Overlap: dag.OverlapAllow,
		Params:   map[string]dag.Param{"k": {Type: "string"}},
		Defaults: dag.StepDefaults{Queue: "q"},
		Steps: []dag.Step{{Name: "call", Run: dag.Executor{Handler: "noop"},
			Concurrency: []dag.ConcurrencyLimit{{Key: "${{ params.k }}", Limit: limit}}}},
	}}, "")
	if err != nil {
		b.Fatal(err)
	}
	d, err := dispatch.New()
	if err != nil {
		b.Fatal(err)
	}
	return j.ID, orun.NewService(pool, jobs, d), d
}

// seedKeyed writes, for keys k1..kN, holders running in queue kq (each
// a run of the keyed job), and held tasks in q (per key, held of them).
func seedKeyed(b *testing.B, pool *pgxpool.Pool, jobID uuid.UUID, keys, holders, held int, limit int) {
	b.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at, started_at)
		SELECT gen_random_uuid(), $1, $2, 1, 0, now() - i * interval '1 millisecond', 'manual', 'pending', now(), now()
		FROM generate_series(1, $3::int * ($4::int + $5::int)) AS i`, job.DefaultTenant, jobID, keys, holders, held); err != nil {
		b.Fatal(err)
	}
	// the run's i-th task: per key, its holders (running in kq), then
	// its held tasks (queued in q)
	if _, err := pool.Exec(ctx, `WITH r AS (SELECT id, (row_number() OVER (ORDER BY id) - 1)::int AS i FROM runs WHERE job_id = $2),
		k AS (SELECT r.id, r.i % ($3::int + $4::int) < $3::int AS holds, 'k' || (r.i / ($3::int + $4::int) + 1) AS key FROM r)
		INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at,
		                   ready_at, admitted_at, started_at, attempt_id, attempt_worker, attempt_started_at, conditional, flow_keys, flow_limits, flow_wait)
		SELECT gen_random_uuid(), $1, k.id, 'call', CASE WHEN k.holds THEN 'running' ELSE 'waiting' END, 0,
		       CASE WHEN k.holds THEN 'kq' ELSE 'q' END, 3, CASE WHEN k.holds THEN 1 ELSE 0 END, now(), now(),
		       CASE WHEN k.holds THEN now() END, CASE WHEN k.holds THEN now() END, CASE WHEN k.holds THEN now() END,
		       CASE WHEN k.holds THEN gen_random_uuid() END, CASE WHEN k.holds THEN 'w-bench' ELSE '' END, CASE WHEN k.holds THEN now() END,
		       true, ARRAY[k.key], ARRAY[$5::int], CASE WHEN NOT k.holds THEN k.key END
		FROM k`, job.DefaultTenant, jobID, holders, held, limit); err != nil {
		b.Fatal(err)
	}
}

func stepKeys(b *testing.B, keys, passes int) {
	pool := freshDB(b)
	ctx := context.Background()
	seedJobs(b, pool, "plain", 1, noopSpec("0 0 1 1 *"), time.Now().Add(24*time.Hour))
	jobID, runs, d := keyedJob(b, pool, 1)
	began := time.Now()
	seedKeyed(b, pool, jobID, keys, 1, 1, 1)
	for _, sql := range []string{
		// 1,000 tasks without keys waiting in q
		`INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at, started_at)
		 SELECT gen_random_uuid(), $1, j.id, 1, 0, now() - i * interval '1 millisecond', 'manual', 'pending', now(), now()
		 FROM jobs AS j, generate_series(1, 1000) AS i WHERE j.name LIKE 'plain-%'`,
		`INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at, ready_at)
		 SELECT gen_random_uuid(), $1, r.id, 'only', 'queued', 0, 'q', 3, 0, now(), now(), now() - random() * interval '1 minute'
		 FROM runs AS r JOIN jobs AS j ON j.id = r.job_id WHERE j.name LIKE 'plain-%'`,
		`INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at)
		 SELECT gen_random_uuid(), 'w' || i, '{"q": 50}', now(), now(), now() + interval '1 day' FROM generate_series(1, 10) AS i`,
		`INSERT INTO queues (name) VALUES ('q') ON CONFLICT DO NOTHING`,
		`VACUUM ANALYZE runs, tasks, workers`,
	} {
		var args []any
		if sql[:6] == "INSERT" && sql[:19] != "INSERT INTO workers" && sql[:18] != "INSERT INTO queues" {
			args = []any{job.DefaultTenant}
		}
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			b.Fatalf("%.50s: %v", sql, err)
		}
	}
	fmt.Fprintf(os.Stderr, "keys=%d: loaded %d holders, %d held tasks and 1,000 waiting in %s\n", keys, keys, keys, time.Since(began).Round(time.Second))
	median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	b.ResetTimer()

	// The admission pass of q: the 1,000 without keys, the held unread.
	start := time.Now()
	res, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: pool}, "q")
	if err != nil {
		b.Fatal(err)
	}
	pass := time.Since(start)
	if res.Admitted != 1000 {
		b.Fatalf("the pass admitted %d of the 1,000 tasks without keys", res.Admitted)
	}

	// A release into a key at its limit: held.
	var release []time.Duration
	for i := range passes {
		start := time.Now()
		r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "keyed"},
			orun.TriggerOptions{ParamTexts: map[string]string{"k": fmt.Sprintf("k%d", 1+i*keys/passes)}})
		if err != nil {
			b.Fatal(err)
		}
		release = append(release, time.Since(start))
		var wait *string
		if err := pool.QueryRow(ctx, "SELECT flow_wait FROM tasks WHERE run_id = $1", r.ID).Scan(&wait); err != nil || wait == nil {
			b.Fatalf("a task released into a key at its limit is not held (%v)", err)
		}
	}

	// A holder's end: its run cancelled (the transaction, not the API's
	// answer), the oldest task held on its key released.
	applier := &orun.Applier{Dispatcher: d}
	var ends []time.Duration
	for i := range passes {
		key := fmt.Sprintf("k%d", 1+(i*keys/passes+keys/(2*passes))%keys)
		var holder uuid.UUID
		if err := pool.QueryRow(ctx, "SELECT run_id FROM tasks WHERE flow_keys = ARRAY[$1] AND flow_wait IS NULL AND status = 'running' LIMIT 1", key).Scan(&holder); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
			_, err := applier.Cancel(ctx, tx, []uuid.UUID{holder}, "bench")
			return err
		}); err != nil {
			b.Fatal(err)
		}
		ends = append(ends, time.Since(start))
		var released int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM tasks WHERE flow_keys = ARRAY[$1] AND flow_wait IS NULL AND status = 'queued'", key).Scan(&released); err != nil || released != 1 {
			b.Fatalf("the cancel of %s's holder released %d tasks held on it (%v)", key, released, err)
		}
	}

	// A run's read (runs get) with the holders running elsewhere.
	var gets []time.Duration
	for i := range passes {
		var id uuid.UUID
		if err := pool.QueryRow(ctx, "SELECT run_id FROM tasks WHERE flow_keys = ARRAY[$1] AND status = 'running' LIMIT 1", fmt.Sprintf("k%d", 1+(i*keys/passes+keys/(3*passes))%keys)).Scan(&id); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := runs.Get(ctx, job.Anonymous, id, orun.ItemsPage{}); err != nil {
			b.Fatal(err)
		}
		gets = append(gets, time.Since(start))
	}

	// The reaper's look over 100 held keys (all at their limit: none
	// released).
	var looks []time.Duration
	cursor := orun.KeyCursor{}
	for range passes {
		start := time.Now()
		if err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
			var err error
			cursor, _, err = applier.PromoteHeldKeys(ctx, tx, cursor, 100)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		looks = append(looks, time.Since(start))
	}
	b.StopTimer()
	fmt.Fprintf(os.Stderr, "keys=%d: admission pass %s (1,000 admitted); release into a held key %s; a holder's end %s; reaper look over 100 keys %s; a holder's run read %s\n",
		keys, pass.Round(100*time.Microsecond), median(release).Round(100*time.Microsecond), median(ends).Round(100*time.Microsecond),
		median(looks).Round(100*time.Microsecond), median(gets).Round(100*time.Microsecond))
	b.ReportMetric(float64(pass.Microseconds())/1000, "pass-ms")
	b.ReportMetric(float64(median(release).Microseconds())/1000, "release-ms")
	b.ReportMetric(float64(median(ends).Microseconds())/1000, "end-ms")
	b.ReportMetric(float64(median(looks).Microseconds())/1000, "reaper-ms")
	b.ReportMetric(float64(median(gets).Microseconds())/1000, "get-ms")
}

func stepKeysFairness(b *testing.B) {
	pool := freshDB(b)
	ctx := context.Background()
	jobID, runs, d := keyedJob(b, pool, 2)
	seedKeyed(b, pool, jobID, 1, 2, 10_000, 2)
	for _, sql := range []string{
		`UPDATE tasks SET flow_keys = ARRAY['big'], flow_wait = CASE WHEN flow_wait IS NULL THEN NULL ELSE 'big' END`,
		`INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at)
		 SELECT gen_random_uuid(), 'w' || i, '{"q": 50}', now(), now(), now() + interval '1 day' FROM generate_series(1, 10) AS i`,
		`INSERT INTO queues (name) VALUES ('q') ON CONFLICT DO NOTHING`,
		`VACUUM ANALYZE runs, tasks, workers`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			b.Fatalf("%.50s: %v", sql, err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	var ids []uuid.UUID
	for i := range 50 {
		r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "keyed"},
			orun.TriggerOptions{ParamTexts: map[string]string{"k": fmt.Sprintf("small-%d", i)}})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	released := time.Since(start)
	var direct int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM tasks WHERE run_id = ANY($1) AND admitted_at IS NOT NULL", ids).Scan(&direct); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	if _, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: pool}, "q"); err != nil {
		b.Fatal(err)
	}
	pass := time.Since(start)
	b.StopTimer()
	var admitted, held int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE run_id = ANY($1) AND admitted_at IS NOT NULL),
		count(*) FILTER (WHERE flow_wait = 'big') FROM tasks`, ids).Scan(&admitted, &held); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "fairness: one key with %d tasks held; 50 keys released in %s, %d of them admitted at their release, %d after one pass (%s)\n",
		held, released.Round(time.Millisecond), direct, admitted, pass.Round(100*time.Microsecond))
	if admitted != 50 {
		b.Fatalf("%d of the 50 keys' tasks admitted within one pass of their release", admitted)
	}
	b.ReportMetric(float64(admitted), "of-50-admitted")
	b.ReportMetric(float64(pass.Microseconds())/1000, "pass-ms")
}
