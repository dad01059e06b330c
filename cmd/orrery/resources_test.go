package main_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// No worker runs, at once, attempts asking for more than its capacity:
// two worker processes of different sizes share a queue whose steps ask
// for 750m (and some for 2 cores, which only the larger one has); by the
// attempts table, what each worker ran at once never passed its capacity
// in any resource, the 2-core steps ran on the larger one only, and every
// run succeeds.
func TestNoWorkerIsOvercommitted(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	ctx := context.Background()
	startNodeProc(t, dsn, "node")
	for _, w := range []struct{ name, capacity string }{{"small", "cpu=1,memory=2Gi"}, {"large", "cpu=4,memory=8Gi"}} {
		startProc(t, w.name, "worker", "--db", dsn, "--queue", "default=8", "--name", w.name, "--capacity", w.capacity,
			"--lease-ttl", "2s", "--allow-command", "/bin/*", "--sandbox", "off", "--log-level", "info")
	}
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := dag.JobSpec{
		Schedule: schedule.Spec{At: "2099-01-01T00:00:00Z"},
		Overlap:  dag.OverlapAllow,
		Defaults: dag.StepDefaults{Resources: &dag.Resources{CPU: "750m", Memory: "512Mi"}},
	}
	for i := range 10 {
		st := dag.Step{Name: fmt.Sprintf("s%d", i), Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/sleep", "0.3"}}}}
		if i%3 == 0 {
			st.Resources = &dag.Resources{CPU: "2", Memory: "1Gi"}
		}
		spec.Steps = append(spec.Steps, st)
	}
	j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "packed"}, Spec: spec}, "")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := pool.Exec(ctx, "UPDATE job_schedules SET next_fire_at = now() WHERE job_id = $1", j.ID); err != nil {
			t.Fatal(err)
		}
		poll(t, 30*time.Second, "the run is created", func() bool {
			return queryInt(t, pool, "SELECT count(*) FROM job_schedules WHERE job_id = $1 AND next_fire_at IS NULL", j.ID) == 1
		})
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rows, _ := pool.Query(context.Background(), `SELECT k.step || ' ' || k.status || ' ' || k.res_cpu || ' ' || coalesce(k.admitted_at::text, '-') || ' ' ||
			coalesce((SELECT string_agg(j.state || '/' || j.queue || '/' || coalesce(j.attempted_by[array_length(j.attempted_by, 1)], '-'), ',') FROM river_job j WHERE (j.args->>'task_id')::uuid = k.id), '')
			FROM tasks k ORDER BY k.created_at`)
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			t.Log(s)
		}
		rows.Close()
	})
	poll(t, 90*time.Second, "every run succeeds", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE status = 'succeeded'") == 3
	})
	for worker, capacity := range map[string][2]int64{"small": {1000, 2 << 30}, "large": {4000, 8 << 30}} {
		var cpu, memory int64
		if err := pool.QueryRow(ctx, `SELECT COALESCE(max(c), 0)::bigint, COALESCE(max(m), 0)::bigint FROM (
			SELECT (SELECT sum(bt.res_cpu) FROM attempts b JOIN tasks bt ON bt.id = b.task_id
			        WHERE b.worker = a.worker AND b.started_at <= a.started_at AND (b.finished_at IS NULL OR b.finished_at > a.started_at)) AS c,
			       (SELECT sum(bt.res_memory) FROM attempts b JOIN tasks bt ON bt.id = b.task_id
			        WHERE b.worker = a.worker AND b.started_at <= a.started_at AND (b.finished_at IS NULL OR b.finished_at > a.started_at)) AS m
			FROM attempts a WHERE a.worker = $1) AS o`, worker).Scan(&cpu, &memory); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s ran at most cpu %dm, memory %d MiB at once (capacity %dm, %d MiB)", worker, cpu, memory>>20, capacity[0], capacity[1]>>20)
		if cpu > capacity[0] || memory > capacity[1] {
			t.Errorf("%s was overcommitted: cpu %dm of %dm, memory %d of %d bytes at once", worker, cpu, capacity[0], memory, capacity[1])
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM attempts a JOIN tasks k ON k.id = a.task_id WHERE k.res_cpu = 2000 AND a.worker <> 'large'`); n != 0 {
		t.Errorf("%d attempts of 2 cores ran on the 1-core worker", n)
	}
	if n := queryInt(t, pool, `SELECT count(DISTINCT worker) FROM attempts`); n != 2 {
		t.Errorf("attempts ran on %d workers, want both", n)
	}
}
