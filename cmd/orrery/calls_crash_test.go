package main_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	orun "github.com/orrery-dev/orrery/internal/run"
)

// A node killed in the transaction that starts a child run (the call the
// report of the step before the job step wrote) leaves no child run, the
// job step waiting and its call in place; a node killed in the
// transaction that ends the job step with its child (the event of the
// child's end) leaves the step running and the event in place. Each
// time, a live process redoes the work once: the parent run succeeds with
// one child run, whose output reaches the step after.
func TestKilledStartingOrEndingAChildRun(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		killed    string // the process that dies: worker or node
		failpoint string
		// after checks what the kill left, in SQL over the parent run ($1):
		// a count that must be 1.
		after string
	}{
		{"start", "node", "run/call-started=kill",
			`SELECT count(*) FROM tasks i WHERE i.run_id = $1 AND i.step = 'invoke' AND i.status = 'waiting' AND i.child_run_id IS NULL
			   AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_task_id = i.id)
			   AND EXISTS (SELECT 1 FROM call_starts s WHERE s.task_id = i.id)
			   AND EXISTS (SELECT 1 FROM tasks p WHERE p.run_id = $1 AND p.step = 'prep' AND p.status = 'succeeded')`},
		{"end", "node", "scheduler/downstream-tx=kill",
			`SELECT count(*) FROM tasks i JOIN runs c ON c.parent_task_id = i.id
			 WHERE i.run_id = $1 AND i.step = 'invoke' AND i.status = 'running' AND c.status = 'succeeded'
			   AND EXISTS (SELECT 1 FROM upstream_finishes e WHERE e.run_id = c.id)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.DSN(t)
			pool := openPool(t, dsn)
			ctx := context.Background()
			var dies *proc
			if tt.killed == "node" {
				dies, _ = nodeToKill(t, dsn, pool, tt.failpoint)
			} else {
				startNodeProc(t, dsn, "node")
				dies = workerProc(t, dsn, "w1", "ORRERY_FAILPOINTS="+tt.failpoint)
			}
			jobs, err := job.New(ctx, pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
			if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "kid"}, Spec: dag.JobSpec{Schedule: never,
				Run: &dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/echo", `{"n": 7}`}}}}}, ""); err != nil {
				t.Fatal(err)
			}
			retry := &dag.Retry{MaxAttempts: 3, Initial: dag.D(100 * time.Millisecond), Max: dag.D(200 * time.Millisecond)}
			if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "mom"}, Spec: dag.JobSpec{
				Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)},
				Defaults: dag.StepDefaults{Retry: retry},
				Steps: []dag.Step{
					{Name: "prep", Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}},
					{Name: "invoke", Needs: []string{"prep"}, Run: dag.Executor{Job: &dag.JobCall{Name: "kid"}}},
					{Name: "after", Needs: []string{"invoke"}, Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/echo", "${{ steps.invoke.output.outputs.main.n }}"}}}},
				},
			}}, ""); err != nil {
				t.Fatal(err)
			}
			poll(t, 60*time.Second, tt.killed+" dies at "+tt.failpoint, dies.exited)
			runID := queryString(t, pool, `SELECT r.id::text FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'mom'`)
			if got := queryInt(t, pool, tt.after, runID); got != 1 {
				t.Fatalf("after the kill: %v", taskStatuses(t, pool, "mom"))
			}
			if tt.killed == "node" {
				startNodeProc(t, dsn, "node-2")
			} else {
				workerProc(t, dsn, "w2")
			}
			poll(t, 60*time.Second, "the parent run succeeds", func() bool { return runStatus(t, pool, "mom", "succeeded") })
			if n := queryInt(t, pool, `SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'kid'`); n != 1 {
				t.Errorf("%d child runs, want 1", n)
			}
			if n := queryInt(t, pool, `SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.run_id = $1 AND t.step = 'invoke'`, runID); n != 1 {
				t.Errorf("the job step has %d attempts, want 1", n)
			}
			if out := queryString(t, pool, `SELECT a.output FROM attempts a JOIN tasks t ON t.id = a.task_id
				WHERE t.run_id = $1 AND t.step = 'after' AND a.outcome = 'succeeded'`, runID); out != "7\n" {
				t.Errorf("the step after read %q of the child's output, want 7", out)
			}
		})
	}
}

// A node killed in the transaction that cancels the runs a cancel left
// for later (a tree of 151 runs: the cancel itself takes the root and 99
// below it) leaves them open and their run_cancels rows in place; the next
// node cancels every one.
func TestKilledCancellingATree(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	ctx := context.Background()
	dies, jobs := nodeToKill(t, dsn, pool, "run/cancels-tx=kill")
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "leaf"}, Spec: dag.JobSpec{Schedule: never,
		Run: &dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/sleep", "60"}}}}}, ""); err != nil {
		t.Fatal(err)
	}
	var steps []dag.Step
	for i := range 150 {
		steps = append(steps, dag.Step{Name: fmt.Sprintf("c%03d", i), Run: dag.Executor{Job: &dag.JobCall{Name: "leaf"}}})
	}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "top"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)}, Steps: steps}}, ""); err != nil {
		t.Fatal(err)
	}
	root := func() string {
		return queryString(t, pool, `SELECT r.id::text FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'top'`)
	}
	poll(t, 60*time.Second, "the tree has its 150 child runs", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM runs WHERE root_run_id IS NOT NULL`) == 150
	})
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orun.NewService(pool, jobs, d).CancelRun(ctx, job.Anonymous, uuid.MustParse(root()), "enough"); err != nil {
		t.Fatal(err)
	}
	poll(t, 60*time.Second, "node-1 dies cancelling the rest", dies.exited)
	if open, left := queryInt(t, pool, `SELECT count(*) FROM runs WHERE root_run_id IS NOT NULL AND finished_at IS NULL`),
		queryInt(t, pool, `SELECT count(*) FROM run_cancels`); open != 51 || left != 51 {
		t.Fatalf("after the kill: %d runs of the tree open, %d cancels left; want 51 and 51", open, left)
	}
	startNodeProc(t, dsn, "node-2")
	poll(t, 60*time.Second, "node-2 cancels them", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM runs WHERE finished_at IS NULL`) == 0 && queryInt(t, pool, `SELECT count(*) FROM run_cancels`) == 0
	})
	if n := queryInt(t, pool, `SELECT count(*) FROM runs WHERE root_run_id IS NOT NULL AND status = 'cancelled'`); n != 150 {
		t.Errorf("%d child runs cancelled, want 150", n)
	}
}
