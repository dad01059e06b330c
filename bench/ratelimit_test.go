package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/store"
)

// BenchmarkRateLimits: step rate limits (docs/flow-control.md, "Rate
// limits") with 100 to 100,000 keys whose tasks wait in their lines (a
// task each, its place an hour ahead, its bucket's row written), beside
// 1,000 tasks without a rate limit waiting in the same queue, served by
// ten workers of 50 slots. Reported per scale, each the median of
// ORRERY_BENCH_PASSES (default 20): the admission pass (it admits the
// 1,000: the lined-up tasks are not read), a pass that lines up one task
// released into a key with a line (it comes after the line), and the
// reaper's sweep of the buckets (none of which is full), and the busiest
// keys' read (the cluster page's and the metrics'). Then fairness:
// one key with 10,000 tasks waiting, not lined up yet (released at once,
// and no pass between), and 50 keys with one task each released after
// them: the passes (and their time) until the 50 are admitted; then 50
// more keys released behind the big key's line: how many one pass admits.
func BenchmarkRateLimits(b *testing.B) {
	for _, keys := range []int{100, 1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			for range b.N {
				rateLimits(b, keys, envInt(b, "ORRERY_BENCH_PASSES", 20))
			}
		})
	}
	b.Run("fairness", func(b *testing.B) {
		for range b.N {
			rateLimitsFairness(b)
		}
	})
}

// seedRated writes a run per task (of one job), and the tasks: n of key
// KEYi (i from 1, keys of them, round robin) queued in q, 1 a 1 hour,
// ready at readyAt (and placed there when placed), oldest first by i.
func seedRated(b *testing.B, pool *pgxpool.Pool, n, keys int, ready string, placed bool) {
	b.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at, started_at)
		SELECT gen_random_uuid(), $1, j.id, 1, 0, now() - (i + (SELECT count(*) FROM runs)) * interval '1 ms', 'manual', 'pending', now(), now()
		FROM jobs AS j, generate_series(1, $2::int) AS i WHERE j.name = 'plain-0000000'`, job.DefaultTenant, n); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `WITH r AS (SELECT id, row_number() OVER (ORDER BY id) AS i FROM runs WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE run_id = runs.id))
		INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at, ready_at,
		                   conditional, rate_key, rate_limit, rate_per_ms, rate_at)
		SELECT gen_random_uuid(), $1, r.id, 'call', 'queued', 0, 'q', 3, 0, now(), now(), `+ready+` + r.i * interval '1 microsecond',
		       true, 'k' || ((r.i - 1) % $2::int + 1), 1, 3600000, CASE WHEN $3::bool THEN `+ready+` + r.i * interval '1 microsecond' END
		FROM r`, job.DefaultTenant, keys, placed); err != nil {
		b.Fatal(err)
	}
}

func rateLimits(b *testing.B, keys, passes int) {
	pool := freshDB(b)
	ctx := context.Background()
	seedJobs(b, pool, "plain", 1, noopSpec("0 0 1 1 *"), time.Now().Add(24*time.Hour))
	began := time.Now()
	seedRated(b, pool, keys, keys, "now() + interval '1 hour'", true)
	for _, sql := range []string{
		// every key's bucket: its token spent, its line an hour ahead
		`INSERT INTO rate_buckets (tenant_id, key, tat, tail)
		 SELECT $1, 'k' || i, now() + interval '1 hour', now() + interval '1 hour' FROM generate_series(1, ` + fmt.Sprint(keys) + `) AS i`,
		`INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at)
		 SELECT gen_random_uuid(), 'w' || i, '{"q": 50}', now(), now(), now() + interval '1 day' FROM generate_series(1, 10) AS i`,
		`INSERT INTO queues (name) VALUES ('q') ON CONFLICT DO NOTHING`,
	} {
		var args []any
		if sql[:24] == "INSERT INTO rate_buckets" {
			args = []any{job.DefaultTenant}
		}
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			b.Fatalf("%.50s: %v", sql, err)
		}
	}
	d, err := dispatch.New()
	if err != nil {
		b.Fatal(err)
	}
	// wait writes the 1,000 tasks without a rate limit waiting in q.
	wait := func() {
		b.Helper()
		if _, err := pool.Exec(ctx, `DELETE FROM tasks WHERE rate_key IS NULL`); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `WITH r AS (SELECT id FROM runs WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE run_id = runs.id) LIMIT 1000)
			INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at, ready_at)
			SELECT gen_random_uuid(), $1, r.id, 'only', 'queued', 0, 'q', 3, 0, now(), now(), now() - random() * interval '1 minute' FROM r`, job.DefaultTenant); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at, started_at)
		SELECT gen_random_uuid(), $1, j.id, 1, 0, now() - (i + (SELECT count(*) FROM runs)) * interval '1 ms', 'manual', 'pending', now(), now()
		FROM jobs AS j, generate_series(1, 1000 + $2::int) AS i WHERE j.name = 'plain-0000000'`, job.DefaultTenant, passes); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE runs, tasks, workers, rate_buckets`); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "keys=%d: loaded %d lined-up tasks and their buckets in %s\n", keys, keys, time.Since(began).Round(time.Second))
	median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	b.ResetTimer()

	// The admission pass: the 1,000 without a rate limit, the lined-up
	// tasks unread. (The slots are given back after each.)
	var admits []time.Duration
	for range passes {
		b.StopTimer()
		wait()
		b.StartTimer()
		start := time.Now()
		res, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: pool}, "q")
		if err != nil {
			b.Fatal(err)
		}
		admits = append(admits, time.Since(start))
		if res.Admitted != 1000 || res.LinedUp != 0 {
			b.Fatalf("the pass admitted %d of the 1,000 tasks without a rate limit, lined up %d", res.Admitted, res.LinedUp)
		}
	}
	if _, err := pool.Exec(ctx, `DELETE FROM tasks WHERE rate_key IS NULL`); err != nil {
		b.Fatal(err)
	}

	// A task released into a key with a line: lined up behind it.
	var lines []time.Duration
	for i := range passes {
		key := fmt.Sprintf("k%d", 1+i*keys/passes)
		var id uuid.UUID
		if err := pool.QueryRow(ctx, `WITH r AS (SELECT id FROM runs WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE run_id = runs.id) LIMIT 1)
			INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at, ready_at,
			                   conditional, rate_key, rate_limit, rate_per_ms)
			SELECT gen_random_uuid(), $1, r.id, 'call', 'queued', 0, 'q', 3, 0, now(), now(), now(), true, $2, 1, 3600000 FROM r RETURNING id`,
			job.DefaultTenant, key).Scan(&id); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: pool}, "q")
		if err != nil {
			b.Fatal(err)
		}
		lines = append(lines, time.Since(start))
		if res.Admitted != 0 || res.LinedUp != 1 {
			b.Fatalf("a task released into %s's line: %+v, want lined up", key, res)
		}
	}

	// The reaper's sweep: no bucket is full.
	var sweeps []time.Duration
	for range passes {
		start := time.Now()
		n, err := store.New(pool).SweepRateBuckets(ctx, 100)
		if err != nil || n != 0 {
			b.Fatalf("the sweep deleted %d buckets (%v)", n, err)
		}
		sweeps = append(sweeps, time.Since(start))
	}
	// The busiest keys (the cluster page's and the metrics' read).
	var busiest []time.Duration
	for range passes {
		start := time.Now()
		rows, err := store.New(pool).BusiestKeys(ctx, store.BusiestKeysParams{AllTenants: true, N: 20})
		if err != nil || len(rows) != 20 {
			b.Fatalf("the busiest keys: %d (%v)", len(rows), err)
		}
		busiest = append(busiest, time.Since(start))
	}
	b.StopTimer()
	fmt.Fprintf(os.Stderr, "keys=%d: admission pass %s (1,000 admitted, %d lined up unread); a task lined up behind its key's line %s; the reaper's sweep %s; the busiest keys %s\n",
		keys, median(admits).Round(100*time.Microsecond), keys, median(lines).Round(100*time.Microsecond), median(sweeps).Round(100*time.Microsecond),
		median(busiest).Round(100*time.Microsecond))
	b.ReportMetric(float64(median(busiest).Microseconds())/1000, "busiest-ms")
	b.ReportMetric(float64(median(admits).Microseconds())/1000, "pass-ms")
	b.ReportMetric(float64(median(lines).Microseconds())/1000, "lineup-ms")
	b.ReportMetric(float64(median(sweeps).Microseconds())/1000, "sweep-ms")
}

func rateLimitsFairness(b *testing.B) {
	pool := freshDB(b)
	ctx := context.Background()
	seedJobs(b, pool, "plain", 1, noopSpec("0 0 1 1 *"), time.Now().Add(24*time.Hour))
	// one key, 10,000 tasks waiting (not lined up: as released at once),
	// then 50 keys with one task each, released after them
	seedRated(b, pool, 10_000, 1, "now() - interval '1 minute'", false)
	if _, err := pool.Exec(ctx, `UPDATE tasks SET rate_key = 'big'`); err != nil {
		b.Fatal(err)
	}
	seedRated(b, pool, 50, 50, "now()", false)
	for _, sql := range []string{
		`UPDATE tasks SET rate_key = 'small-' || rate_key WHERE rate_key <> 'big'`,
		`INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at)
		 SELECT gen_random_uuid(), 'w' || i, '{"q": 50}', now(), now(), now() + interval '1 day' FROM generate_series(1, 10) AS i`,
		`INSERT INTO queues (name) VALUES ('q') ON CONFLICT DO NOTHING`,
		`VACUUM ANALYZE runs, tasks, workers`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			b.Fatalf("%.50s: %v", sql, err)
		}
	}
	d, err := dispatch.New()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	var passes, lined int
	for {
		res, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: pool}, "q")
		if err != nil {
			b.Fatal(err)
		}
		passes++
		lined += res.LinedUp
		if res.Admitted == 0 && res.LinedUp == 0 {
			break
		}
	}
	took := time.Since(start)
	b.StopTimer()
	var small, big int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE rate_key LIKE 'small-%' AND admitted_at IS NOT NULL),
		count(*) FILTER (WHERE rate_key = 'big' AND admitted_at IS NOT NULL) FROM tasks`).Scan(&small, &big); err != nil {
		b.Fatal(err)
	}
	if small != 50 || big != 1 {
		b.Fatalf("%d of the 50 keys' tasks and %d of the big key's admitted; want 50 and 1", small, big)
	}
	// The big key's line is given: 50 more keys released now start in
	// one pass.
	b.StartTimer()
	seedRated(b, pool, 50, 50, "now()", false)
	if _, err := pool.Exec(ctx, `UPDATE tasks SET rate_key = 'later-' || rate_key WHERE rate_key ~ '^k[0-9]+$'`); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	res, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: pool}, "q")
	if err != nil {
		b.Fatal(err)
	}
	after := time.Since(start)
	b.StopTimer()
	fmt.Fprintf(os.Stderr, "fairness: one key with 10,000 tasks waiting, not lined up yet, and 50 keys behind it: %d of the 50 and %d of the big key admitted, %d lined up, in %d passes (%s); then 50 keys released behind the big key's line: %d admitted by one pass (%s)\n",
		small, big, lined, passes, took.Round(time.Millisecond), res.Admitted, after.Round(100*time.Microsecond))
	if res.Admitted != 50 {
		b.Fatalf("%d of 50 keys released behind a line admitted by one pass", res.Admitted)
	}
	b.ReportMetric(float64(passes), "passes")
	b.ReportMetric(float64(took.Microseconds())/1000, "ms")
}
