package run_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// A batch of reports may hold a stale report (attempt 1, whose lease
// lapsed) beside the current one (attempt 2) of the same one-task run:
// only the current one is accepted, the stale one is kept on its attempt.
func TestSoleReportsBatchStaleBesideCurrent(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	res := dag.Resource{Metadata: dag.Metadata{Name: "sole"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}, Run: &dag.Executor{Handler: "noop"},
		Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 3, Initial: dag.D(time.Millisecond), Max: dag.D(time.Millisecond)}},
	}}
	if _, err := jobs.Create(ctx, job.Anonymous, res, ""); err != nil {
		t.Fatal(err)
	}
	r, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: "sole"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	taskID := enginetest.UUID(t, pool, "SELECT id FROM tasks WHERE run_id = $1", r.ID)

	// The worker "w" and its lease, which is its tasks'.
	wid := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at)
		VALUES ($1, 'w', '{"default": 1}', now(), now(), now() + interval '1 minute')`, wid); err != nil {
		t.Fatal(err)
	}
	start := func(attempt int) *run.Attempt {
		t.Helper()
		got, err := run.StartAttempts(ctx, pool, []run.Start{{TaskID: taskID, Attempt: attempt}}, run.Worker{Name: "w", ID: wid})
		if err != nil || got[0] == nil {
			t.Fatalf("start attempt %d: %v %v", attempt, got, err)
		}
		return got[0]
	}
	first := start(1)
	// The lease of attempt 1 (its worker's) lapses: the reaper's report
	// moves the token on.
	if _, err := pool.Exec(ctx, "UPDATE workers SET lease_expires_at = now() - interval '1 second' WHERE id = $1", wid); err != nil {
		t.Fatal(err)
	}
	if err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := (&run.Applier{Dispatcher: d}).Finish(ctx, tx, []run.Report{{TaskID: taskID, FencingToken: first.Call.FencingToken, Expired: true,
			Result: executor.Result{ExitReason: executor.ReasonLeaseExpired, FailureClass: executor.ClassSystem, Retryable: true}}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	second := start(2)

	var accepted []bool
	if err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		accepted, err = (&run.Applier{Dispatcher: d}).Finish(ctx, tx, []run.Report{
			{TaskID: taskID, FencingToken: first.Call.FencingToken, Result: executor.Result{OK: true}, Shape: &first.Shape},
			{TaskID: taskID, FencingToken: second.Call.FencingToken, Result: executor.Result{OK: true}, Shape: &second.Shape},
		})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if accepted[0] || !accepted[1] {
		t.Fatalf("accepted %v, want [false true]", accepted)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM attempts WHERE number = 1 AND exit_reason = 'lease_expired' AND late_outcome = 'succeeded'"); n != 1 {
		t.Fatal("the stale report is not kept on attempt 1")
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE id = $1 AND status = 'succeeded'", r.ID); n != 1 {
		t.Fatal("the run did not succeed")
	}
}
