package run

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// The end of an attempt: lifecycle.FinishAttempt decides, the Applier
// writes the task, its attempt and, when it was the last, its run.

// Report is how a worker says an attempt ended.
type Report struct {
	TaskID       uuid.UUID
	RunID        uuid.UUID // for lock ordering in batches; optional
	FencingToken int64
	Result       executor.Result
	// Shape of the step, from StartAttempt; nil: read it from the database.
	Shape *Shape
	// Expired: the report is the reaper's (the lease lapsed), not the
	// worker's; if the token moved on meanwhile there is nothing to record.
	Expired bool
	// LeaseLost: the worker stopped the attempt because its lease was not
	// its own any more (lapsed, cancelled or taken). Like the reaper's, such
	// a report applies only while the lease is lapsed; otherwise it is a
	// late report, recorded on the attempt.
	LeaseLost bool
}

// Cascades says whether finishing the report may settle many tasks
// besides its own: a failure for good of a step that others need (its
// descendants then fail upstream, up to thousands in one statement).
// Workers finish such reports apart from the others, so that one large
// pipeline's failure never holds up the reports of other runs. A report
// without its Shape is taken not to.
func (r Report) Cascades() bool {
	return r.Shape != nil && lifecycle.Cascades(*r.Shape, r.ending())
}

// ending is the report's result as the task's life sees it.
func (r Report) ending() lifecycle.Ending {
	return lifecycle.Ending{OK: r.Result.OK, Retryable: r.Result.Retryable, LeaseLapsed: r.leaseLapsed()}
}

// finish decides what the report does (lifecycle.FinishAttempt).
func (r Report) finish(shape *Shape) lifecycle.Finish {
	return lifecycle.FinishAttempt(*shape, r.ending(), nil)
}

// leaseLapsed is whether a report applies only to a lapsed lease.
func (r Report) leaseLapsed() bool { return r.Expired || r.LeaseLost }

// FinishAttempt records an attempt's outcome if its fencing token is still
// the task's (invariant 5), in one transaction with its consequences: on
// success the children whose last parent this was are released
// (invariant 4); on failure the task retries after a backoff or, out of
// attempts or not retryable, is dead-lettered and its waiting descendants
// fail upstream; when the run has nothing left to do it finishes, and a run
// held back by overlap: queue starts. A stale report is recorded on its
// attempt and changes nothing else; FinishAttempt then returns false.
func (a *Applier) FinishAttempt(ctx context.Context, tx pgx.Tx, r Report) (bool, error) {
	r.Result = r.Result.Storable()
	q := store.New(tx)
	shape := r.Shape
	if shape == nil {
		pol, err := q.TaskRetryPolicy(ctx, r.TaskID)
		if store.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		spec, err := specs.get(ctx, tx, pol.JobID, pol.JobVersion)
		if err != nil {
			return false, err
		}
		sh, ok := shapeOf(spec, pol.Step, int(pol.Attempt))
		if !ok {
			return false, fmt.Errorf("task %s: step %q is not in its job version", r.TaskID, pol.Step)
		}
		shape = &sh
	}
	if shape.SingleTask {
		r.Shape = shape
		ok, err := a.FinishSoleAttempts(ctx, tx, []Report{r})
		if err != nil {
			return false, err
		}
		return ok[0], nil
	}
	// Tasks of one run finish one at a time, so that the last sees all
	// terminal. Lock order: the run, then its tasks.
	if _, err := q.LockRunOfTask(ctx, r.TaskID); err != nil {
		if store.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	f := r.finish(shape)
	done, err := completeAttempts(ctx, q, []Report{r}, []lifecycle.Finish{f})
	if err != nil {
		return false, err
	}
	t, ok := done[attemptKey{r.TaskID, r.FencingToken}]
	if !ok {
		return false, lateReport(ctx, q, r, f.Outcome)
	}
	switch {
	case f.Task == lifecycle.TaskRetrying:
		return true, a.Dispatcher.Release(ctx, tx, []dispatch.Ready{retryOf(r.TaskID, t.TenantID, t.Queue, t.Priority, t.Now, f)})
	case t.GroupID != nil: // an item of a fan-out: its group counts its end
		e := &itemEnds{succeeded: 1}
		if f.Task != lifecycle.TaskSucceeded {
			e = &itemEnds{failed: 1}
		}
		return true, countItemEnds(ctx, q, tx, a, map[uuid.UUID]*itemEnds{*t.GroupID: e})
	case f.ReleaseChildren:
		if err := releaseChildren(ctx, q, tx, a, r.TaskID); err != nil {
			return false, err
		}
	case f.FailDescendants:
		if err := propagate(ctx, q, tx, a, t.RunID, r.TaskID, lifecycle.TaskDeadLettered); err != nil {
			return false, err
		}
	}
	return true, finishRun(ctx, tx, a, t.RunID, f.PromoteHeld)
}

// retryOf is the release of a task f retries, its backoff counted from
// now (the database's clock at the failure).
func retryOf(task, tenant uuid.UUID, queue string, priority int32, now time.Time, f lifecycle.Finish) dispatch.Ready {
	var at time.Time
	if f.RetryIn > 0 {
		at = now.Add(f.RetryIn)
	}
	rd := dispatch.NextAttempt(task, tenant, queue, priority, int32(f.NextAttempt-1))
	rd.NotBefore = at
	return rd
}

// lateReport records a report whose fencing token is no longer the task's
// on its attempt (unless the reaper made it: then there is nothing to say).
func lateReport(ctx context.Context, q *store.Queries, r Report, outcome lifecycle.AttemptOutcome) error {
	if r.Expired {
		return nil
	}
	return q.RecordLateReport(ctx, store.RecordLateReportParams{TaskID: r.TaskID, FencingToken: r.FencingToken, Outcome: string(outcome), Error: r.Result.Error})
}

// FinishSoleAttempts is FinishAttempt for a batch of reports on runs of
// one task each (Shape known, SingleTask): every task, its attempt and,
// when the task ends, its run, in one statement; then, in the same
// transaction, the retries are released, the runs overlap: queue held back
// start, and stale reports are recorded on their attempts. Such a run
// needs no run lock: its one task's row, locked by the update, is what
// orders the writes of the run.
func (a *Applier) FinishSoleAttempts(ctx context.Context, tx pgx.Tx, reports []Report) ([]bool, error) {
	q := store.New(tx)
	finishes := make([]lifecycle.Finish, len(reports))
	for i, r := range reports {
		if r.Shape == nil || !r.Shape.SingleTask {
			return nil, fmt.Errorf("task %s: not the only task of its run", r.TaskID)
		}
		finishes[i] = r.finish(r.Shape)
		reports[i].Result = r.Result.Storable() // for lateReport too
	}
	done, err := completeAttempts(ctx, q, reports, finishes)
	if err != nil {
		return nil, err
	}
	accepted := make([]bool, len(reports))
	var retries []dispatch.Ready
	for i, r := range reports {
		f := finishes[i]
		t, ok := done[attemptKey{r.TaskID, r.FencingToken}]
		if !ok {
			if err := lateReport(ctx, q, r, f.Outcome); err != nil {
				return nil, err
			}
			continue
		}
		accepted[i] = true
		if f.Run != "" {
			a.finished(tx, f.Run)
		}
		switch {
		case f.Task == lifecycle.TaskRetrying:
			retries = append(retries, retryOf(r.TaskID, t.TenantID, t.Queue, t.Priority, t.Now, f))
		case f.PromoteHeld && t.JobID != nil:
			if err := promoteQueued(ctx, tx, a, *t.JobID); err != nil {
				return nil, err
			}
		}
	}
	return accepted, a.Dispatcher.Release(ctx, tx, retries)
}

// attemptKey names an attempt by task and fencing token: a stale report may
// share its batch with the current attempt's report on the same task.
type attemptKey struct {
	task  uuid.UUID
	token int64
}

// completeAttempts ends the attempts of reports (their results storable)
// as finishes say, in one statement (CompleteAttempts): each task, its
// attempt and, where the finish ends the run (a one-task run), the run. It
// returns the rows of the reports it took; a stale report has none.
func completeAttempts(ctx context.Context, q *store.Queries, reports []Report, finishes []lifecycle.Finish) (map[attemptKey]store.CompleteAttemptsRow, error) {
	p := store.CompleteAttemptsParams{}
	for i, r := range reports {
		f, res := finishes[i], r.Result
		p.Ids = append(p.Ids, r.TaskID)
		p.FencingTokens = append(p.FencingTokens, r.FencingToken)
		p.Statuses = append(p.Statuses, string(f.Task))
		p.Outcomes = append(p.Outcomes, string(f.Outcome))
		p.ExitReasons = append(p.ExitReasons, res.ExitReason)
		p.FailureClasses = append(p.FailureClasses, res.FailureClass)
		p.Errors = append(p.Errors, res.Error)
		p.Outputs = append(p.Outputs, res.Output)
		p.Truncateds = append(p.Truncateds, res.OutputTruncated)
		p.Logs = append(p.Logs, res.Log)
		p.RunStatuses = append(p.RunStatuses, string(f.Run))
		p.RunReasons = append(p.RunReasons, f.RunReason)
		p.Expired = append(p.Expired, r.leaseLapsed())
	}
	rows, err := q.CompleteAttempts(ctx, p)
	if err != nil {
		return nil, err
	}
	done := make(map[attemptKey]store.CompleteAttemptsRow, len(rows))
	for _, t := range rows {
		done[attemptKey{t.ID, t.FencingToken}] = t
	}
	return done, nil
}

// finishRun finishes the run when none of its tasks is left to run, and
// then starts the job's run that overlap: queue held back.
func finishRun(ctx context.Context, tx pgx.Tx, a *Applier, runID uuid.UUID, queueOverlap bool) error {
	row, err := store.New(tx).FinishRunIfDone(ctx, runID)
	if store.IsNotFound(err) {
		return nil // tasks remain, or the run finished already (cancelled)
	}
	if err != nil {
		return err
	}
	a.finished(tx, lifecycle.RunStatus(row.Status))
	if !queueOverlap {
		return nil
	}
	return promoteQueued(ctx, tx, a, row.JobID)
}
