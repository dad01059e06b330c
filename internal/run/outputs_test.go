package run_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// TestStepOutputsAreOnlyASucceededTasks: a step's output is its latest
// succeeded attempt's only while the step stands succeeded. A step that
// succeeded and was then skipped (a rerun whose condition turned false)
// has no output: its children and conditions must not read the old one.
func TestStepOutputsAreOnlyASucceededTasks(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "two", Namespace: "default"},
		Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Steps: []dag.Step{
			{Name: "a", Run: dag.Executor{Handler: "h"}},
			{Name: "b", Needs: []string{"a"}, Run: dag.Executor{Handler: "h"}},
		}}}, ""); err != nil {
		t.Fatal(err)
	}
	r, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: "two"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO attempts (id, task_id, tenant_id, number, fencing_token, worker, started_at, finished_at, outcome, output)
		SELECT gen_random_uuid(), id, tenant_id, 1, 1, 'w', now(), now(), 'succeeded', '"old"' FROM tasks WHERE run_id = $1 AND step = 'a'`, r.ID); err != nil {
		t.Fatal(err)
	}
	output := func(status string) string {
		t.Helper()
		if _, err := pool.Exec(ctx, "UPDATE tasks SET status = $2 WHERE run_id = $1 AND step = 'a'", r.ID, status); err != nil {
			t.Fatal(err)
		}
		rows, err := store.New(pool).StepOutputs(ctx, store.StepOutputsParams{RunIds: []uuid.UUID{r.ID}, Steps: []string{"a"}})
		if err != nil || len(rows) != 1 {
			t.Fatalf("StepOutputs: %v %v", rows, err)
		}
		return rows[0].Output
	}
	if got := output("succeeded"); got != `"old"` {
		t.Errorf("a succeeded step's output: %q, want \"old\"", got)
	}
	for _, st := range []string{"skipped", "waiting", "upstream_failed", "dead_lettered"} {
		if got := output(st); got != "" {
			t.Errorf("a %s step (succeeded before) reads output %q, want none", st, got)
		}
	}
}
