package main_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// Queues placed in queue databases of their own (--queue-db NAME=URL):
// each queue's River jobs go to its database (through the outbox and the
// relay), the workers of each queue fetch there, and a run whose steps
// span the two queues crosses between them. A worker whose queues are in
// two databases is refused, and so are bad flags, each naming what is
// wrong.
func TestQueuesInQueueDatabasesOfTheirOwn(t *testing.T) {
	t.Parallel()
	dsn, dbA, dbB := pgtest.DSN(t), pgtest.DSN(t), pgtest.DSN(t)
	pool, poolA, poolB := openPool(t, dsn), openPool(t, dbA), openPool(t, dbB)
	queueDBs := []string{"--queue-db", "a=" + dbA, "--queue-db", "b=" + dbB}
	if out, stderr, code := run(t, append([]string{"migrate", "status", "--db", dsn}, queueDBs...)...); code != 0 || strings.Count(out, "river    version") != 3 {
		t.Fatalf("migrate status: exit %d, want a River version for each of 3 databases:\n%s%s", code, out, stderr)
	}
	startProc(t, "node", append([]string{"serve", "--db", dsn, "--addr", "127.0.0.1:0", "--node-name", "node", "--shard-ttl", "2s", "--log-level", "info"}, queueDBs...)...)
	worker := func(name, queue string, env ...string) *proc {
		return startProcEnv(t, name, env, append([]string{"worker", "--db", dsn, "--queue", queue + "=2", "--name", name, "--lease-ttl", "2s",
			"--allow-command", "/bin/*", "--log-level", "info"}, queueDBs...)...)
	}
	workerA, workerB := worker("worker-a", "a"), worker("worker-b", "b")
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "across"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)},
		Steps: []dag.Step{
			{Name: "first", Queue: "a", Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}},
			{Name: "second", Queue: "b", Needs: []string{"first"}, Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}},
		},
	}}, ""); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "the run crosses from queue a to queue b and succeeds", func() bool { return runStatus(t, pool, "across", "succeeded") })
	for _, c := range []struct {
		name string
		n    int
	}{
		{"a in a's database", queryInt(t, poolA, "SELECT count(*) FROM river_job WHERE queue = 'a'")},
		{"b in a's database", queryInt(t, poolA, "SELECT count(*) FROM river_job WHERE queue <> 'a'")},
		{"b in b's database", queryInt(t, poolB, "SELECT count(*) FROM river_job WHERE queue = 'b'")},
		{"a in b's database", queryInt(t, poolB, "SELECT count(*) FROM river_job WHERE queue <> 'b'")},
		{"any in the state database", queryInt(t, pool, "SELECT count(*) FROM river_job")},
	} {
		want := 0
		if c.name == "a in a's database" || c.name == "b in b's database" {
			want = 1
		}
		if c.n != want {
			t.Errorf("River jobs of %s: %d, want %d", c.name, c.n, want)
		}
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM dispatch_outbox"); n != 0 {
		t.Errorf("%d outbox rows left, want 0 (relayed)", n)
	}

	// b's database breaks (its River table gone): b's tasks wait in the
	// outbox, and a's go on.
	oneStep := func(name, queue string) {
		t.Helper()
		if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: dag.JobSpec{
			Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)},
			Steps:    []dag.Step{{Name: "only", Queue: queue, Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}}},
		}}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := poolB.Exec(ctx, "ALTER TABLE river_job RENAME TO river_job_away"); err != nil {
		t.Fatal(err)
	}
	oneStep("to-b", "b")
	poll(t, 30*time.Second, "b's task waits in the outbox", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM dispatch_outbox WHERE queue = 'b'") == 1
	})
	oneStep("to-a", "a")
	poll(t, 30*time.Second, "a's run succeeds while b's database is broken", func() bool { return runStatus(t, pool, "to-a", "succeeded") })

	// b's worker dies first, and its sweep fails while b's database is
	// broken; a worker of a then dies holding a fetched job: the reaper
	// sweeps it all the same, and another worker of a runs the job.
	workerB.signal(t, syscall.SIGKILL)
	workerA.signal(t, syscall.SIGTERM)
	poll(t, 20*time.Second, "worker-a stops", workerA.exited)
	dying := worker("worker-a2", "a", "ORRERY_FAILPOINTS=worker/fetched=kill")
	oneStep("to-a2", "a")
	poll(t, 30*time.Second, "worker-a2 fetches the job and dies", dying.exited)
	worker("worker-a3", "a")
	poll(t, 30*time.Second, "the job worker-a2 fetched is delivered again and succeeds", func() bool { return runStatus(t, pool, "to-a2", "succeeded") })

	if _, err := poolB.Exec(ctx, "ALTER TABLE river_job_away RENAME TO river_job"); err != nil {
		t.Fatal(err)
	}
	worker("worker-b2", "b")
	poll(t, 30*time.Second, "b's run succeeds once its database is back", func() bool { return runStatus(t, pool, "to-b", "succeeded") })

	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"worker", "--db", dsn, "--queue", "a=1", "--queue", "b=1"}, queueDBs...), "run one worker per queue database"},
		{[]string{"migrate", "status", "--db", dsn, "--queue-db", "bad name=" + dbA}, "--queue-db bad name=...: queue name"},
		{[]string{"migrate", "status", "--db", dsn, "--queue-db", "a=" + dbA, "--queue-db", "a=" + dbB}, `queue "a" given twice`},
		{[]string{"migrate", "status", "--db", dsn, "--queue-db", dbA, "--queue-db", dbB}, "name the queue"},
	} {
		_, stderr, code := run(t, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("orrery %s: exit %d, stderr %q; want an error saying %q", strings.Join(c.args[:2], " "), code, stderr, c.want)
		}
	}
}
