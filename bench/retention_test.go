package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/job"
)

// BenchmarkSteadyWhilePruning is BenchmarkSteadyFires on a database that
// also holds ORRERY_BENCH_OLD_RUNS (default 10,000,000) finished runs 30
// days old, each with a task and an attempt, which the node's janitor
// prunes (default retention, 7 days) while the steady load runs. Compare
// its p99 lag with BenchmarkSteadyFires in the same session; it also
// reports how many old runs were pruned during the benchmark.
func BenchmarkSteadyWhilePruning(b *testing.B) {
	old := envInt(b, "ORRERY_BENCH_OLD_RUNS", 10_000_000)
	for range b.N {
		pool := freshDB(b)
		ctx := context.Background()
		loadOldRuns(b, pool, old, "30 days")
		steadyFires(b, pool)
		if os.Getenv("ORRERY_BENCH_LAG_BY_SECOND") != "" {
			rows, err := pool.Query(ctx, `SELECT r.scheduled_for, max(a.started_at - r.scheduled_for) FROM runs r JOIN tasks t ON t.run_id = r.id
				JOIN attempts a ON a.task_id = t.id WHERE r.scheduled_for > now() - interval '1 hour' GROUP BY 1 ORDER BY 1`)
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				var at time.Time
				var lag time.Duration
				_ = rows.Scan(&at, &lag)
				fmt.Fprintf(os.Stderr, "%s max lag %s\n", at.Format("15:04:05"), lag)
			}
			rows.Close()
		}
		var left int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM runs WHERE finished_at < now() - interval '29 days'").Scan(&left); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(old-left), "old-runs-pruned")
	}
}

// loadOldRuns writes n finished runs (of one job "old-0000000"), each with
// a task and an attempt, finished age ago and before (40 ms apart),
// then vacuums and analyzes those tables and checkpoints.
func loadOldRuns(b *testing.B, pool *pgxpool.Pool, n int, age string) {
	b.Helper()
	ctx := context.Background()
	seedJobs(b, pool, "old", 1, noopSpec("0 0 1 1 *"), time.Now().Add(24*time.Hour))
	began := time.Now()
	for _, sql := range []string{
		// One run every 40 ms before now - age (10,000,000 span 4.6 days),
		// each created, started and finished at its instant. Ids are
		// time-ordered as Orrery's own (UUIDv7: 48 bits of milliseconds,
		// then random), from the run's instant: random ids would scatter
		// the storm's inserts over every page of the history's indexes,
		// which real history does not.
		`INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at, started_at, finished_at)
			 SELECT (lpad(to_hex((extract(epoch FROM t.at) * 1000)::bigint), 12, '0') || left(md5(random()::text), 20))::uuid,
			        $1, j.id, 1, i % 64, t.at, 'schedule', 'succeeded', t.at, t.at, t.at
			 FROM jobs AS j, generate_series(1, $2::int) AS i, LATERAL (SELECT now() - $3::interval - i * interval '40 milliseconds' AS at) AS t
			 WHERE j.name LIKE 'old-%'`,
		`INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at, started_at, finished_at)
			 SELECT (left(replace(id::text, '-', ''), 12) || left(md5(random()::text), 20))::uuid, tenant_id, id, 'main', 'succeeded', 0, 'default', 3, 1,
			        created_at, created_at, started_at, finished_at FROM runs`,
		`INSERT INTO attempts (id, task_id, tenant_id, number, fencing_token, worker, started_at, finished_at, outcome)
			 SELECT (left(replace(id::text, '-', ''), 12) || left(md5(random()::text), 20))::uuid, id, tenant_id, 1, 1, 'w', started_at, finished_at, 'succeeded'
			 FROM tasks`,
		// Only the loaded tables: analyzing River's empty river_job here
		// gave its fetch a sequential scan joined in a nested loop once the
		// table filled (0.9-2.2 s per fetch), until autovacuum re-analyzed.
		`VACUUM ANALYZE runs, tasks, attempts`,
		`CHECKPOINT`,
	} {
		args := []any{job.DefaultTenant, n, age}
		if sql[:6] != "INSERT" || sql[12:16] != "runs" {
			args = nil
		}
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			b.Fatalf("%.40s: %v", sql, err)
		}
	}
	fmt.Fprintf(os.Stderr, "loaded %d old runs with their tasks and attempts in %s\n", n, time.Since(began).Round(time.Second))
}
