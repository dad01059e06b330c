package main_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// A worker killed in the report transaction that decides a child's
// condition, after deciding and before writing, leaves nothing half
// decided: the report rolls back (the parent still running, the child
// still waiting, with nothing written of its condition); once the dead
// worker's lease lapses the parent runs again on a live worker, whose
// report decides the condition once, and the run succeeds.
func TestKilledWhileDecidingACondition(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	startNodeProc(t, dsn, "node")
	w1 := workerProc(t, dsn, "w1", "ORRERY_FAILPOINTS=run/conditions-decided=kill")
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	retry := &dag.Retry{MaxAttempts: 3, Initial: dag.D(100 * time.Millisecond), Max: dag.D(200 * time.Millisecond)}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{
		Metadata: dag.Metadata{Name: "decide"},
		Spec: dag.JobSpec{
			Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)},
			Params:   map[string]dag.Param{"dry_run": {Type: "boolean", Default: dag.Payload("false")}},
			Defaults: dag.StepDefaults{Retry: retry},
			Steps: []dag.Step{
				{Name: "list", Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/echo", `{"changed": true}`}}}},
				{Name: "publish", Needs: []string{"list"}, When: "${{ !params.dry_run && steps.list.output.changed }}",
					Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}},
			},
		},
	}, ""); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "w1 decides publish's condition and dies before writing", w1.exited)
	if got := queryInt(t, pool, `SELECT count(*) FROM tasks t JOIN runs r ON r.id = t.run_id JOIN jobs j ON j.id = r.job_id
		WHERE j.name = 'decide' AND ((t.step = 'list' AND t.status = 'running') OR (t.step = 'publish' AND t.status = 'waiting' AND t.parents_remaining = 1))`); got != 2 {
		t.Fatalf("after the kill: %v; want list running and publish waiting for it", taskStatuses(t, pool, "decide"))
	}
	workerProc(t, dsn, "w2")
	poll(t, 30*time.Second, "list runs again on w2, publish is decided and runs", func() bool { return runStatus(t, pool, "decide", "succeeded") })
	if got := taskStatuses(t, pool, "decide"); got["publish"] != "succeeded" || got["list"] != "succeeded" {
		t.Fatalf("tasks %v", got)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id JOIN runs r ON r.id = t.run_id JOIN jobs j ON j.id = r.job_id
		WHERE j.name = 'decide' AND t.step = 'publish'`); n != 1 {
		t.Fatalf("publish has %d attempts, want 1", n)
	}
}

// taskStatuses is the status of each step of a job's (only) run.
func taskStatuses(t *testing.T, pool *pgxpool.Pool, jobName string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT t.step, t.status FROM tasks t JOIN runs r ON r.id = t.run_id
		JOIN jobs j ON j.id = r.job_id WHERE j.name = $1`, jobName)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var step, status string
		if err := rows.Scan(&step, &status); err != nil {
			t.Fatal(err)
		}
		out[step] = status
	}
	return out
}
