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
	"github.com/orrery-dev/orrery/internal/store"
)

// A worker killed in the transaction that expands a fan-out (its parent's
// report) leaves no item and the group waiting; a worker killed in an
// item's report leaves the item's end uncounted. Each time the dead
// worker's lease lapses, the attempt runs again on a live worker, and the
// run ends with every item once and the group's counts exact.
func TestKilledInsideAFanOut(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, failpoint string
		// after checks what the kill left, in SQL over the job's tasks (t)
		// and its group (g): a count that must be 1.
		after string
	}{
		{"expansion", "run/expanded",
			`SELECT count(*) FROM tasks g WHERE g.run_id = $1 AND g.step = 'load' AND g.status = 'waiting'
			   AND NOT EXISTS (SELECT 1 FROM tasks i WHERE i.group_id = g.id)
			   AND EXISTS (SELECT 1 FROM tasks l WHERE l.run_id = $1 AND l.step = 'list' AND l.status = 'running')`},
		{"item report", "run/item-counted",
			`SELECT count(*) FROM tasks g WHERE g.run_id = $1 AND g.step = 'load' AND g.status = 'expanded'
			   AND g.items_open = 5 AND g.items_succeeded = 0
			   AND (SELECT count(*) FROM tasks i WHERE i.group_id = g.id) = 5`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.DSN(t)
			pool := openPool(t, dsn)
			startNodeProc(t, dsn, "node")
			w1 := workerProc(t, dsn, "w1", "ORRERY_FAILPOINTS="+tt.failpoint+"=kill")
			ctx := context.Background()
			jobs, err := job.New(ctx, pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			retry := &dag.Retry{MaxAttempts: 3, Initial: dag.D(100 * time.Millisecond), Max: dag.D(200 * time.Millisecond)}
			if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{
				Metadata: dag.Metadata{Name: "fan"},
				Spec: dag.JobSpec{
					Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)},
					Defaults: dag.StepDefaults{Retry: retry},
					Steps: []dag.Step{
						{Name: "list", Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/echo", `["a", "b", "c", "d", "e"]`}}}},
						{Name: "load", Needs: []string{"list"}, ForEach: "${{ steps.list.output }}", MaxParallel: 2,
							Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/echo", `{"f": "${{ item }}"}`}}}},
						{Name: "report", Needs: []string{"load"},
							Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/echo", "${{ steps.load.outputs.map(o, o.f).join(',') }}"}}}},
					},
				},
			}, ""); err != nil {
				t.Fatal(err)
			}
			poll(t, 30*time.Second, "w1 dies at "+tt.failpoint, w1.exited)
			runID := queryString(t, pool, `SELECT r.id::text FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'fan'`)
			if got := queryInt(t, pool, tt.after, runID); got != 1 {
				t.Fatalf("after the kill: %v", taskStatuses(t, pool, "fan"))
			}
			workerProc(t, dsn, "w2")
			poll(t, 60*time.Second, "the run succeeds on w2", func() bool { return runStatus(t, pool, "fan", "succeeded") })
			if got := queryInt(t, pool, `SELECT count(*) FROM tasks g WHERE g.run_id = $1 AND g.step = 'load' AND g.status = 'succeeded'
				AND g.items_total = 5 AND g.items_open = 0 AND g.items_succeeded = 5 AND g.items_failed = 0`, runID); got != 1 {
				t.Fatalf("the group's counts are off: %v", taskStatuses(t, pool, "fan"))
			}
			if got := queryInt(t, pool, `SELECT count(*) FROM tasks WHERE run_id = $1 AND group_id IS NOT NULL AND status = 'succeeded'`, runID); got != 5 {
				t.Fatalf("%d items succeeded, want 5", got)
			}
			if out := queryString(t, pool, `SELECT a.output FROM attempts a JOIN tasks t ON t.id = a.task_id
				WHERE t.run_id = $1 AND t.step = 'report' AND a.outcome = 'succeeded'`, runID); out != "a,b,c,d,e\n" {
				t.Fatalf("report printed %q", out)
			}
		})
	}
}

// queryString reads one text, read again after a serialization failure
// (as queryInt).
func queryString(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := store.Retry(context.Background(), func() error { return pool.QueryRow(context.Background(), sql, args...).Scan(&s) }); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}
