package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/internal/dispatch"
)

// BenchmarkAdmissionPass: one admission pass over a queue of 100,000
// waiting tasks of mixed sizes (a quarter core, a core, 4 cores and 8Gi,
// 2 cores and a GPU) spread over 100, 1,000 or 10,000 tenants, served by
// ten workers of 50 slots (two with 2 GPUs): the first pass, which fills
// the queue (1,000 tasks), then steady passes that each admit the 100
// whose slots a finish just freed. Reported per scale: the first pass and
// the steady pass (median of ORRERY_BENCH_PASSES, default 20), in ms, and
// after them the most tasks any one tenant holds against its equal share.
func BenchmarkAdmissionPass(b *testing.B) {
	for _, tenants := range []int{100, 1_000, 10_000} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			for range b.N {
				admissionPass(b, tenants, envInt(b, "ORRERY_BENCH_PASSES", 20))
			}
		})
	}
}

func admissionPass(b *testing.B, tenants, passes int) {
	const tasks = 100_000
	pool := freshDB(b)
	ctx := context.Background()
	seedJobs(b, pool, "adm", 1, noopSpec("0 0 1 1 *"), time.Now().Add(24*time.Hour))
	began := time.Now()
	for _, sql := range []string{
		`INSERT INTO tenants (id, name, weight) SELECT gen_random_uuid(), 'adm-' || i, 1 FROM generate_series(1, $1::int) AS i`,
		// One run per tenant, its tasks of four sizes, ready over the last
		// hour in random order.
		`INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at, started_at)
		 SELECT gen_random_uuid(), t.id, j.id, 1, 0, now() - row_number() OVER () * interval '1 second', 'manual', 'running', now(), now()
		 FROM tenants AS t, jobs AS j WHERE t.name LIKE 'adm-%' AND j.name LIKE 'adm-%'`,
		`INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at, ready_at,
		                    res_cpu, res_memory, res_gpu)
		 SELECT gen_random_uuid(), r.tenant_id, r.id, 's' || i, 'queued', 0, 'q', 3, 0, now(), now(), now() - random() * interval '1 hour',
		        (ARRAY[250, 1000, 4000, 2000])[1 + i % 4], (ARRAY[268435456, 1073741824, 8589934592, 1073741824])[1 + i % 4], (ARRAY[0, 0, 0, 1])[1 + i % 4]
		 FROM runs AS r,
		      generate_series(1, ($2::int / $1::int)) AS i`,
		`INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at, cap_cpu, cap_memory, cap_gpu)
		 SELECT gen_random_uuid(), 'w' || i, '{"q": 50}', now(), now(), now() + interval '1 day', 64000, 274877906944, CASE WHEN i <= 2 THEN 2 ELSE 0 END
		 FROM generate_series(1, 10) AS i`,
		`INSERT INTO queues (name) VALUES ('q') ON CONFLICT DO NOTHING`,
		`VACUUM ANALYZE tenants, runs, tasks, workers`,
	} {
		var args []any
		switch {
		case sql[:21] == "INSERT INTO tenants (":
			args = []any{tenants}
		case sql[:19] == "INSERT INTO tasks (":
			args = []any{tenants, tasks}
		}
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			b.Fatalf("%.50s: %v", sql, err)
		}
	}
	fmt.Fprintf(os.Stderr, "tenants=%d: loaded %d waiting tasks in %s\n", tenants, tasks, time.Since(began).Round(time.Second))
	d, err := dispatch.New()
	if err != nil {
		b.Fatal(err)
	}
	cfg := dispatch.AdmitConfig{Pool: pool}
	pass := func() (time.Duration, int) {
		start := time.Now()
		res, err := d.AdmitOnce(ctx, cfg, "q")
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start), res.Admitted
	}
	b.ResetTimer()
	first, n := pass()
	var steady []time.Duration
	admitted := n
	for range passes {
		// 100 of the tasks in flight end (not timed).
		b.StopTimer()
		if _, err := pool.Exec(ctx, `UPDATE tasks SET status = 'succeeded', admitted_at = NULL, finished_at = now()
			WHERE id IN (SELECT id FROM tasks WHERE queue = 'q' AND admitted_at IS NOT NULL AND status = 'queued' ORDER BY random() LIMIT 100)`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		took, n := pass()
		steady = append(steady, took)
		admitted += n
	}
	b.StopTimer()
	slices.Sort(steady)
	var most, holding int
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(n), 0), count(*) FROM (SELECT count(*) AS n FROM tasks
		WHERE queue = 'q' AND admitted_at IS NOT NULL AND status = 'queued' GROUP BY tenant_id) AS h`).Scan(&most, &holding); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "tenants=%d: first pass %d admitted in %s; steady passes (100 each) median %s, max %s; %d tenants hold, at most %d each\n",
		tenants, n, first.Round(100*time.Microsecond), steady[len(steady)/2].Round(100*time.Microsecond),
		steady[len(steady)-1].Round(100*time.Microsecond), holding, most)
	b.ReportMetric(float64(first.Microseconds())/1000, "first-pass-ms")
	b.ReportMetric(float64(steady[len(steady)/2].Microseconds())/1000, "steady-pass-ms")
	b.ReportMetric(float64(admitted), "admitted")
}
