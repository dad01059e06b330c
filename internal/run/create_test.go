package run_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// Runs written as records (skipped, or cancelled by a newer instant of the
// same firing pass) are finished when written, so that retention prunes
// them like any finished run; they have no tasks.
func TestRecordsAreWrittenFinished(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "records"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Run: &dag.Executor{Handler: "noop"}, Overlap: dag.OverlapCancelPrevious}}, "")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	ref := run.JobRef{ID: j.ID, Tenant: j.Tenant, Version: j.Version, Shard: j.Shard, Spec: &j.Spec}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	err = store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := (&run.Applier{Dispatcher: d}).Insert(ctx, tx, []run.New{
			{Job: ref, At: at, Trigger: "schedule", Status: lifecycle.RunCancelled, Reason: "overlap: cancel_previous (a newer instant fired)"},
			{Job: ref, At: at.Add(time.Hour), Trigger: "schedule", Status: lifecycle.RunSkipped, Reason: "misfire: skip"},
		}, nil, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE finished_at IS NOT NULL AND status IN ('cancelled', 'skipped')"); n != 2 {
		t.Errorf("%d of the 2 records are finished, want both", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM tasks"); n != 0 {
		t.Errorf("records have %d tasks, want none", n)
	}
}
