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

// A tenant's quota holds through crashes at the two places that hold
// slots: a node killed inside its admission transaction (after it marked
// tasks and inserted their River jobs, before the commit) admits nothing,
// and a worker killed while running the tenant's tasks gives their slots
// back when their leases lapse. The run then completes on other processes,
// and no more of the tenant's attempts than its quota ever ran at once (by
// the attempts table, the killed worker's attempts counted until the
// reaper ended them).
func TestQuotaSurvivesKilledAdmitterAndWorker(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "UPDATE tenants SET max_concurrency = 2 WHERE id = $1", job.DefaultTenant); err != nil {
		t.Fatal(err)
	}
	n1 := startProcEnv(t, "node-1", []string{"ORRERY_FAILPOINTS=dispatch/admitted=kill@1"},
		"serve", "--db", dsn, "--addr", "127.0.0.1:0", "--node-name", "node-1", "--shard-ttl", "2s", "--log-level", "info")
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := dag.JobSpec{
		Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)},
		Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 3, Initial: dag.D(100 * time.Millisecond), Max: dag.D(200 * time.Millisecond)}},
	}
	for i := range 6 {
		spec.Steps = append(spec.Steps, dag.Step{Name: fmt.Sprintf("s%d", i),
			Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/sleep", "0.3"}}}})
	}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "capped"}, Spec: spec}, ""); err != nil {
		t.Fatal(err)
	}
	// No worker yet: the node's admitter finds no slots and keeps looking.
	// A worker's advertisement gives it two; it admits, and dies.
	poll(t, 20*time.Second, "the run's tasks are released", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM tasks WHERE status = 'queued'") == 6
	})
	if _, err := pool.Exec(ctx, `INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at)
		VALUES (gen_random_uuid(), 'ad', '{"default": 2}', now(), now(), now() + interval '3 seconds')`); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "node-1 dies inside its admission transaction", n1.exited)
	if n := queryInt(t, pool, "SELECT count(*) FROM tasks WHERE admitted_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d tasks admitted by a transaction that never committed", n)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM river_job"); n != 0 {
		t.Fatalf("%d River jobs from a transaction that never committed", n)
	}
	startNodeProc(t, dsn, "node-2")
	w1 := workerProc(t, dsn, "w1", "ORRERY_FAILPOINTS=worker/started=kill@2")
	poll(t, 30*time.Second, "w1 starts two attempts and dies", w1.exited)
	workerProc(t, dsn, "w2")
	took := poll(t, 60*time.Second, "the run succeeds on w2", func() bool { return runStatus(t, pool, "capped", "succeeded") })
	t.Logf("run succeeded %s after w2 started (w1's two slots came back with its 2 s leases)", took.Round(100*time.Millisecond))
	if n := queryInt(t, pool, "SELECT count(*) FROM attempts WHERE worker = 'w1' AND exit_reason = 'lease_expired'"); n != 2 {
		t.Fatalf("%d of w1's attempts ended by lease expiry, want 2", n)
	}
	overlap := queryInt(t, pool, `SELECT COALESCE(max(n), 0)::int FROM (
		SELECT (SELECT count(*) FROM attempts b WHERE b.started_at <= a.started_at
		        AND (b.finished_at IS NULL OR b.finished_at > a.started_at)) AS n FROM attempts a) AS o`)
	if overlap > 2 {
		t.Fatalf("%d attempts ran at once, quota 2", overlap)
	}
}
