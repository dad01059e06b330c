package bench

import (
	"testing"

	"github.com/orrery-dev/orrery/internal/job"
)

// BenchmarkWithHistory is the midnight storm, then the steady load, on a
// database that already holds ORRERY_BENCH_HISTORY_RUNS (default
// 10,000,000) finished runs, each with a task and an attempt, two to seven
// days old (within the retention: the janitor leaves them), loaded by SQL.
// Before them it prints the plans of the due-jobs probe and of a page of
// the run list (EXPLAIN ANALYZE). Compare with BenchmarkMidnightStorm and
// BenchmarkSteadyFires in one command.
const explainAnalyze = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "

func BenchmarkWithHistory(b *testing.B) {
	n := envInt(b, "ORRERY_BENCH_HISTORY_RUNS", 10_000_000)
	for range b.N {
		pool := freshDB(b)
		loadOldRuns(b, pool, n, "2 days")
		explain(b, pool, "due jobs of 64 shards", explainAnalyze+`SELECT job_id FROM job_schedules
			WHERE shard = ANY($1::int[]) AND next_fire_at <= now()
			ORDER BY next_fire_at LIMIT 500 FOR UPDATE`, allShards())
		explain(b, pool, "a page of the run list", explainAnalyze+`SELECT r.id, j.name FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
			WHERE r.tenant_id = $1 AND (r.scheduled_for, r.id) < ('infinity'::timestamptz, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
			ORDER BY r.scheduled_for DESC, r.id DESC LIMIT 50`, job.DefaultTenant)
		explain(b, pool, "a page of one job's runs", explainAnalyze+`SELECT r.id FROM runs AS r
			WHERE r.tenant_id = $1 AND r.job_id = (SELECT id FROM jobs WHERE name = 'old-0000000')
			ORDER BY r.scheduled_for DESC LIMIT 50`, job.DefaultTenant)
		b.Run("storm", func(b *testing.B) { midnightStorm(b, pool) })
		b.Run("steady", func(b *testing.B) { steadyFires(b, pool) })
	}
}
