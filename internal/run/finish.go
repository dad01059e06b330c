package run

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
	return lifecycle.Ending{OK: r.Result.OK, Retryable: r.Result.Retryable, LeaseLapsed: r.leaseLapsed(),
		TimedOut: r.Result.ExitReason == executor.ReasonTimeout}
}

// finish decides what the report does (lifecycle.FinishAttempt).
func (r Report) finish(shape *Shape) lifecycle.Finish {
	return lifecycle.FinishAttempt(*shape, r.ending(), nil)
}

// leaseLapsed is whether a report applies only to a lapsed lease.
func (r Report) leaseLapsed() bool { return r.Expired || r.LeaseLost }

// Finish records a batch of ended attempts in the caller's transaction,
// with their consequences: a worker's or a remote worker's reports, the
// reaper's lapsed leases, job steps whose child run ended. It is the one
// way an attempt's end is written. Each report is taken if its fencing
// token is still its task's (invariant 5): on success the children whose
// last parent this was are released (invariant 4); on failure the task
// retries after a backoff or, out of attempts or not retryable, is
// dead-lettered and its waiting descendants fail upstream; a run with
// nothing left to do finishes, and a run held back by overlap: queue
// starts. A stale report is recorded on its attempt and changes nothing
// else. Finish returns, per report, whether it was taken (false too for a
// task that is gone, and for an attempt the batch names again: a call
// retried while the first was waiting in a batcher is taken once).
//
// The lock order, the same for every batch (docs/lifecycle.md): the
// reports on runs of one task first, in one statement, their task's row
// ordering them (no run lock); then the runs of the others, all at once
// in key order; then the items of fan-outs, together; then the others one
// at a time in run order, so that the last task of a run sees the others
// ended.
func (a *Applier) Finish(ctx context.Context, tx pgx.Tx, reports []Report) ([]bool, error) {
	return a.in(tx).finish(ctx, reports)
}

// FinishInTx is Finish in a transaction of its own on pool, retried as
// store.InRawTx retries; written is called when the batch is written,
// before it commits. A worker's reports and a gateway's (remote
// workers') go through it.
func (a *Applier) FinishInTx(ctx context.Context, pool *pgxpool.Pool, reports []Report, written func()) ([]bool, error) {
	var accepted []bool
	err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if accepted, err = a.Finish(ctx, tx, reports); err != nil {
			return err
		}
		written()
		return nil
	})
	return accepted, err
}

// finish is Finish.
func (ap *applying) finish(ctx context.Context, reports []Report) ([]bool, error) {
	reports = slices.Clone(reports)
	known, err := ap.shapes(ctx, reports)
	if err != nil {
		return nil, err
	}
	var sole, items, other []int
	var runs []uuid.UUID // of the items and the others
	first := make(map[attemptKey]bool, len(reports))
	for i := range reports {
		r := &reports[i]
		r.Result = r.Result.Storable()
		key := attemptKey{r.TaskID, r.FencingToken}
		switch {
		case !known[i]:
		case first[key]: // the same attempt again (a retried call joined the batch): stale
		case r.Shape.SingleTask:
			sole = append(sole, i)
		case r.Shape.Item:
			items = append(items, i)
			runs = append(runs, r.RunID)
		default:
			other = append(other, i)
			runs = append(runs, r.RunID)
		}
		first[key] = true
	}
	slices.SortStableFunc(other, func(x, y int) int { return slices.Compare(reports[x].RunID[:], reports[y].RunID[:]) })
	accepted := make([]bool, len(reports))
	if err := ap.finishSole(ctx, reports, sole, accepted); err != nil {
		return nil, err
	}
	if len(runs) > 0 {
		if err := ap.q.LockRuns(ctx, runs); err != nil {
			return nil, err
		}
	}
	if err := ap.finishTogether(ctx, reports, items, accepted); err != nil { // items: their groups count them
		return nil, err
	}
	if err := ap.finishOthers(ctx, reports, other, accepted); err != nil {
		return nil, err
	}
	return accepted, nil
}

// finishOthers finishes the reports at idx (in run order) on runs of
// several tasks that are not fan-out items: those of runs the batch names
// once together (finishTogether), since no two of them share a run; those
// of a run the batch names more than once one at a time, so that the last
// task of the run sees the others ended.
func (ap *applying) finishOthers(ctx context.Context, all []Report, idx []int, accepted []bool) error {
	per := make(map[uuid.UUID]int, len(idx))
	for _, i := range idx {
		per[all[i].RunID]++
	}
	var apart, together []int
	for _, i := range idx {
		if per[all[i].RunID] == 1 {
			together = append(together, i)
		} else {
			apart = append(apart, i)
		}
	}
	if err := ap.finishTogether(ctx, all, together, accepted); err != nil {
		return err
	}
	for _, i := range apart {
		if err := ap.finishTogether(ctx, all, []int{i}, accepted); err != nil {
			return err
		}
	}
	return nil
}

// finishTogether finishes the reports at idx, their runs locked: their
// attempts in one statement (stale reports recorded on theirs), then
// retries released, items of fan-outs counted by their groups (any number
// of one run), the descendants of failures settled, the children of
// successes counted and released in one, and each run finished when
// nothing is left in it. A report that is not an item must be its run's
// only one among them (its run's end is decided once all are written).
func (ap *applying) finishTogether(ctx context.Context, all []Report, idx []int, accepted []bool) error {
	taken, err := ap.complete(ctx, all, idx, accepted)
	if err != nil {
		return err
	}
	var retries []dispatch.Ready
	var parents []uuid.UUID
	items := map[uuid.UUID]*itemEnds{}
	for _, e := range taken {
		switch f, t := e.f, e.t; {
		case f.Task == lifecycle.TaskRetrying:
			retries = append(retries, retryOf(e.r.TaskID, t.TenantID, t.Queue, t.Priority, t.Now, f))
		case t.GroupID != nil: // an item of a fan-out: its group counts its end
			n := items[*t.GroupID]
			if n == nil {
				n = &itemEnds{}
				items[*t.GroupID] = n
			}
			if f.Task == lifecycle.TaskSucceeded {
				n.succeeded++
			} else {
				n.failed++
			}
		case f.ReleaseChildren:
			parents = append(parents, e.r.TaskID)
		case f.FailDescendants:
			if err := ap.propagate(ctx, t.RunID, e.r.TaskID, lifecycle.TaskDeadLettered); err != nil {
				return err
			}
		case f.SkipDescendants:
			if err := ap.propagate(ctx, t.RunID, e.r.TaskID, lifecycle.TaskSkipped); err != nil {
				return err
			}
		}
	}
	if err := ap.Dispatcher.Release(ctx, ap.tx, retries); err != nil {
		return err
	}
	if len(items) > 0 {
		if err := ap.countItemEnds(ctx, items); err != nil {
			return err
		}
	}
	if err := ap.releaseChildren(ctx, parents...); err != nil {
		return err
	}
	for _, e := range taken {
		if e.f.Task != lifecycle.TaskRetrying && e.t.GroupID == nil {
			if err := ap.finishRun(ctx, e.t.RunID, e.f.PromoteHeld); err != nil {
				return err
			}
		}
	}
	return nil
}

// shapes fills in the Shape and RunID of the reports that did not carry
// them (the reaper's, a job step's), reading their tasks in one
// statement, and says which reports' tasks exist.
func (ap *applying) shapes(ctx context.Context, reports []Report) ([]bool, error) {
	known := make([]bool, len(reports))
	var ids []uuid.UUID
	for i, r := range reports {
		known[i] = r.Shape != nil && r.RunID != uuid.Nil
		if !known[i] {
			ids = append(ids, r.TaskID)
		}
	}
	if len(ids) == 0 {
		return known, nil
	}
	rows, err := ap.q.TaskShapes(ctx, ids)
	if err != nil {
		return nil, err
	}
	keys := make([]specKey, len(rows))
	byTask := make(map[uuid.UUID]store.TaskShapesRow, len(rows))
	for i, t := range rows {
		keys[i] = specKey{t.JobID, t.JobVersion}
		byTask[t.ID] = t
	}
	got, err := specs.getMany(ctx, ap.tx, keys)
	if err != nil {
		return nil, err
	}
	for i := range reports {
		r := &reports[i]
		t, ok := byTask[r.TaskID]
		if known[i] || !ok {
			continue
		}
		r.RunID = t.RunID
		if r.Shape == nil {
			sh, ok := shapeOf(got[specKey{t.JobID, t.JobVersion}], t.Step, int(t.Attempt))
			if !ok {
				return nil, fmt.Errorf("task %s: step %q is not in its job version", r.TaskID, t.Step)
			}
			r.Shape = &sh
		}
		known[i] = true
	}
	return known, nil
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
func (ap *applying) lateReport(ctx context.Context, r Report, outcome lifecycle.AttemptOutcome) error {
	if r.Expired {
		return nil
	}
	return ap.q.RecordLateReport(ctx, store.RecordLateReportParams{TaskID: r.TaskID, FencingToken: r.FencingToken, Outcome: string(outcome), Error: r.Result.Error})
}

// finishSole finishes the reports at idx, on runs of one task each:
// every task, its attempt and, when the task ends, its run, in one
// statement; then the retries are released, the runs overlap: queue held
// back start, and stale reports are recorded on their attempts. Such a
// run needs no run lock: its one task's row, locked by the update, is
// what orders the writes of the run.
func (ap *applying) finishSole(ctx context.Context, all []Report, idx []int, accepted []bool) error {
	taken, err := ap.complete(ctx, all, idx, accepted)
	if err != nil {
		return err
	}
	var retries []dispatch.Ready
	for _, e := range taken {
		switch f, t := e.f, e.t; {
		case f.Task == lifecycle.TaskRetrying:
			retries = append(retries, retryOf(e.r.TaskID, t.TenantID, t.Queue, t.Priority, t.Now, f))
		case f.PromoteHeld && t.JobID != nil:
			if _, err := ap.promoteQueued(ctx, *t.JobID, t.RunKeys); err != nil {
				return err
			}
		}
	}
	return ap.Dispatcher.Release(ctx, ap.tx, retries)
}

// ended is a report whose attempt completeAttempts ended: its finish and
// its task's row.
type ended struct {
	r Report
	f lifecycle.Finish
	t store.CompleteAttemptsRow
}

// complete ends the attempts of the reports at idx of all in one
// statement (completeAttempts), records the stale ones on their attempts,
// marks the others in accepted and returns them.
func (ap *applying) complete(ctx context.Context, all []Report, idx []int, accepted []bool) ([]ended, error) {
	if len(idx) == 0 {
		return nil, nil
	}
	reports, finishes := make([]Report, len(idx)), make([]lifecycle.Finish, len(idx))
	for k, i := range idx {
		reports[k], finishes[k] = all[i], all[i].finish(all[i].Shape)
	}
	done, err := ap.completeAttempts(ctx, reports, finishes)
	if err != nil {
		return nil, err
	}
	taken := make([]ended, 0, len(reports))
	for k, r := range reports {
		t, ok := done[attemptKey{r.TaskID, r.FencingToken}]
		if !ok {
			if err := ap.lateReport(ctx, r, finishes[k].Outcome); err != nil {
				return nil, err
			}
			continue
		}
		accepted[idx[k]] = true
		if finishes[k].Run != "" {
			ap.finished(ap.tx, finishes[k].Run)
		}
		if finishes[k].Task != lifecycle.TaskRetrying { // a retry holds its keys through its backoff
			if err := ap.keysEnded(ctx, t.TenantID, t.FlowKeys, t.FlowLimits); err != nil {
				return nil, err
			}
		}
		taken = append(taken, ended{r, finishes[k], t})
	}
	return taken, nil
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
func (ap *applying) completeAttempts(ctx context.Context, reports []Report, finishes []lifecycle.Finish) (map[attemptKey]store.CompleteAttemptsRow, error) {
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
	rows, err := ap.q.CompleteAttempts(ctx, p)
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
func (ap *applying) finishRun(ctx context.Context, runID uuid.UUID, holdsRuns bool) error {
	row, err := store.New(ap.tx).FinishRunIfDone(ctx, runID)
	if store.IsNotFound(err) {
		return nil // tasks remain, or the run finished already (cancelled)
	}
	if err != nil {
		return err
	}
	ap.finished(ap.tx, lifecycle.RunStatus(row.Status))
	if !holdsRuns {
		return nil
	}
	_, err = ap.promoteQueued(ctx, row.JobID, row.ConcurrencyKeys)
	return err
}
