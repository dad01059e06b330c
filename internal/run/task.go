package run

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// Attempt is a started attempt: what the executor needs, and what its
// report needs to know of the step.
type Attempt struct {
	Call    executor.Call
	Timeout time.Duration
	Shape   Shape
	// StartedAt is the attempt's start on the database's clock.
	StartedAt time.Time
	// ReleasedAt is when the task was first handed to the queue (nil for
	// a task released before it was recorded).
	ReleasedAt *time.Time
	// TraceParent is the run's trace ("" when traces were off).
	TraceParent string
}

// Shape is what finishing an attempt needs to know of its step and run,
// read from the job version the run pinned: it spares queries on the hot
// path (a single-step run needs no run lock, a step without dependents no
// child release).
type Shape = lifecycle.Shape

func shapeOf(spec *parsedSpec, step string, attempt int) (Shape, bool) {
	for i, st := range spec.Steps {
		if st.Name != step {
			continue
		}
		set := spec.Effective(i)
		return Shape{Attempt: attempt, MaxAttempts: set.MaxAttempts, Initial: set.Initial, Max: set.Max,
			SingleTask: len(spec.Steps) == 1, QueueOverlap: spec.Overlap == dag.OverlapQueue,
			HasChildren: spec.hasChildren[step], Root: len(st.Needs) == 0}, true
	}
	return Shape{}, false
}

// Start asks to start attempt number Attempt of a task.
type Start struct {
	TaskID  uuid.UUID
	Attempt int
}

// Worker names the worker process attempts start on: its name (shown on
// attempts) and its id (its row in workers, whose lease is its running
// tasks' lease).
type Worker struct {
	Name string
	ID   uuid.UUID
}

// StartAttempts starts a batch of attempts on a worker, in one statement;
// each task's lease is then the worker's. The answer is in the order of
// starts; nil for a start whose River job is stale (the task was
// cancelled, or that attempt already ran or is started by another start
// of the same batch).
func StartAttempts(ctx context.Context, db store.DBTX, starts []Start, w Worker) ([]*Attempt, error) {
	p := store.StartAttemptsParams{Worker: w.Name, WorkerID: w.ID}
	for _, st := range starts {
		p.Ids = append(p.Ids, st.TaskID)
		p.PrevAttempts = append(p.PrevAttempts, int32(st.Attempt-1))
		p.AttemptIds = append(p.AttemptIds, uuid.Must(uuid.NewV7()))
	}
	rows, err := store.New(db).StartAttempts(ctx, p)
	if err != nil {
		return nil, err
	}
	return startedAttempts(ctx, db, starts, rows)
}

// OwnAttempt is the attempt st asks for when worker w has started it
// already: w's own start, committed while its answer was lost (a
// connection cut at COMMIT), found when the start is tried again (a batch
// served once more, River retrying the job). Nil when the task does not
// run that attempt on w. Whether the attempt still runs in w's process is
// for w to know.
func OwnAttempt(ctx context.Context, db store.DBTX, st Start, w Worker) (*Attempt, error) {
	row, err := store.New(db).OwnRunningAttempt(ctx, store.OwnRunningAttemptParams{ID: st.TaskID, Attempt: int32(st.Attempt), WorkerID: w.ID})
	if store.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out, err := startedAttempts(ctx, db, []Start{st}, []store.StartAttemptsRow{store.StartAttemptsRow(row)})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// startedAttempts builds the attempts of started tasks (rows) in the order
// of starts, nil for a start without its row.
func startedAttempts(ctx context.Context, db store.DBTX, starts []Start, rows []store.StartAttemptsRow) ([]*Attempt, error) {
	byTask := make(map[uuid.UUID]store.StartAttemptsRow, len(rows))
	keys := make([]specKey, len(rows))
	for i, r := range rows {
		byTask[r.ID] = r
		keys[i] = specKey{r.JobID, r.JobVersion}
	}
	batchSpecs, err := specs.getMany(ctx, db, keys)
	if err != nil {
		return nil, err
	}
	out := make([]*Attempt, len(starts))
	for i, st := range starts {
		t, ok := byTask[st.TaskID]
		if !ok {
			continue
		}
		// Two River jobs for one attempt (a redelivery beside the job it
		// replaces) may share a batch: the task moved once, so only the
		// first of them starts it.
		delete(byTask, st.TaskID)
		spec := batchSpecs[specKey{t.JobID, t.JobVersion}]
		idx := slices.IndexFunc(spec.Steps, func(s dag.Step) bool { return s.Name == t.Step })
		if idx < 0 {
			return nil, fmt.Errorf("run %s: step %q is not in its job version", t.RunID, t.Step)
		}
		step := spec.Steps[idx]
		shape, _ := shapeOf(spec, t.Step, int(t.Attempt))
		var tp string
		if t.TraceParent != nil {
			tp = *t.TraceParent
		}
		out[i] = &Attempt{
			TraceParent: tp,
			Shape:       shape,
			Timeout:     spec.Effective(idx).Timeout,
			StartedAt:   t.StartedAt,
			ReleasedAt:  t.ReleasedAt,
			Call: executor.Call{
				RunID: t.RunID, TaskID: t.ID, JobID: t.JobID, Tenant: t.Tenant, Namespace: t.Namespace, Job: t.Name, Step: t.Step,
				Attempt: int(t.Attempt), FencingToken: t.FencingToken, ScheduledFor: t.ScheduledFor, Trigger: string(t.Trigger),
				Payload: json.RawMessage(step.Payload), Executor: step.Run,
			},
		}
	}
	return out, nil
}

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
	res := r.Result
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
	t, err := q.CompleteTask(ctx, store.CompleteTaskParams{
		ID: r.TaskID, FencingToken: r.FencingToken, Expired: r.leaseLapsed(), Status: string(f.Task), Outcome: string(f.Outcome), ExitReason: res.ExitReason,
		FailureClass: res.FailureClass, Error: res.Error, Output: res.Output,
	})
	if store.IsNotFound(err) {
		return false, lateReport(ctx, q, r, f.Outcome)
	}
	if err != nil {
		return false, err
	}
	switch {
	case f.ReleaseChildren:
		if err := releaseChildren(ctx, q, tx, a, r.TaskID); err != nil {
			return false, err
		}
	case f.Task == lifecycle.TaskRetrying:
		return true, a.Dispatcher.Release(ctx, tx, []dispatch.Ready{retryOf(r.TaskID, t.TenantID, t.Queue, t.Priority, t.Now, f)})
	case f.FailDescendants:
		if err := propagateFailure(ctx, q, tx, a, t.RunID, r.TaskID); err != nil {
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

// releaseChildren counts a succeeded parent for each waiting child and
// releases the children whose count reaches zero (invariant 4).
func releaseChildren(ctx context.Context, q *store.Queries, tx pgx.Tx, a *Applier, parent uuid.UUID) error {
	children, err := q.DecrementChildren(ctx, parent)
	if err != nil {
		return err
	}
	counted := make([]store.DecrementTasksRow, len(children))
	for i, c := range children {
		counted[i] = store.DecrementTasksRow(c)
	}
	return releaseCounted(ctx, q, tx, a, counted)
}

// releaseCounted releases the tasks whose count of parents to wait for
// reached zero (after DecrementChildren or DecrementTasks).
func releaseCounted(ctx context.Context, q *store.Queries, tx pgx.Tx, a *Applier, tasks []store.DecrementTasksRow) error {
	var ready []dispatch.Ready
	for _, c := range tasks {
		if c.ParentsRemaining == 0 {
			ready = append(ready, dispatch.NextAttempt(c.ID, c.TenantID, c.Queue, c.Priority, 0))
		}
	}
	if len(ready) == 0 {
		return nil
	}
	return releaseWaiting(ctx, q, tx, a, ready)
}

// releaseWaiting moves waiting tasks to queued (those Direct admits,
// admitted) and releases them.
func releaseWaiting(ctx context.Context, q *store.Queries, tx pgx.Tx, a *Applier, ready []dispatch.Ready) error {
	if err := a.Dispatcher.Direct(ctx, tx, ready); err != nil {
		return err
	}
	p := store.ReleaseTasksParams{Admitted: []uuid.UUID{}}
	for _, r := range ready {
		p.Ids = append(p.Ids, r.TaskID)
		if r.Admitted {
			p.Admitted = append(p.Admitted, r.TaskID)
		}
	}
	if err := q.ReleaseTasks(ctx, p); err != nil {
		return err
	}
	return a.Dispatcher.Release(ctx, tx, ready)
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
	p := store.CompleteSoleTasksParams{}
	finishes := make([]lifecycle.Finish, len(reports))
	for i, r := range reports {
		if r.Shape == nil || !r.Shape.SingleTask {
			return nil, fmt.Errorf("task %s: not the only task of its run", r.TaskID)
		}
		f := r.finish(r.Shape)
		finishes[i] = f
		reports[i].Result = r.Result.Storable() // for lateReport too
		res := reports[i].Result
		p.Ids = append(p.Ids, r.TaskID)
		p.FencingTokens = append(p.FencingTokens, r.FencingToken)
		p.Statuses = append(p.Statuses, string(f.Task))
		p.Outcomes = append(p.Outcomes, string(f.Outcome))
		p.ExitReasons = append(p.ExitReasons, res.ExitReason)
		p.FailureClasses = append(p.FailureClasses, res.FailureClass)
		p.Errors = append(p.Errors, res.Error)
		p.Outputs = append(p.Outputs, res.Output)
		p.RunStatuses = append(p.RunStatuses, string(f.Run))
		p.RunReasons = append(p.RunReasons, f.RunReason)
		p.Expired = append(p.Expired, r.leaseLapsed())
	}
	rows, err := q.CompleteSoleTasks(ctx, p)
	if err != nil {
		return nil, err
	}
	// By task and token: a stale report may share its batch with the
	// current attempt's report on the same task.
	type attemptKey struct {
		task  uuid.UUID
		token int64
	}
	done := make(map[attemptKey]store.CompleteSoleTasksRow, len(rows))
	for _, t := range rows {
		done[attemptKey{t.ID, t.FencingToken}] = t
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

// propagateFailure settles the descendants of a task of run that failed
// for good: a waiting all_success child fails upstream (and so on below
// it); a waiting all_done child counts the failed parent as done, and is
// released when that was its last, so cleanup and notify steps run
// anyway. The first levels are read level by level (most failures end
// there, having read only their own children); a failure deeper than
// shallowLevels reads the run's waiting edges once and walks them in
// memory, so that no cascade costs a round trip per level.
func propagateFailure(ctx context.Context, q *store.Queries, tx pgx.Tx, a *Applier, run, failed uuid.UUID) error {
	var fail, done []uuid.UUID
	seen := map[uuid.UUID]bool{}
	// settle counts one level's edges and returns the next level.
	settle := func(edges []edge) []uuid.UUID {
		var next []uuid.UUID
		for _, e := range edges {
			switch {
			case e.rule == dag.TriggerAllDone:
				done = append(done, e.child) // once per failed parent
			case !seen[e.child]:
				seen[e.child] = true
				next = append(next, e.child)
			}
		}
		fail = append(fail, next...)
		return next
	}
	frontier := []uuid.UUID{failed}
	for level := 0; len(frontier) > 0 && level < shallowLevels; level++ {
		rows, err := q.WaitingChildren(ctx, frontier)
		if err != nil {
			return err
		}
		edges := make([]edge, len(rows))
		for i, r := range rows {
			edges[i] = edge{r.ChildID, r.TriggerRule}
		}
		frontier = settle(edges)
	}
	if len(frontier) > 0 {
		rows, err := q.WaitingEdgesOfRun(ctx, run)
		if err != nil {
			return err
		}
		children := make(map[uuid.UUID][]edge, len(rows))
		for _, r := range rows {
			children[r.ParentID] = append(children[r.ParentID], edge{r.ChildID, r.TriggerRule})
		}
		for len(frontier) > 0 {
			var edges []edge
			for _, p := range frontier {
				edges = append(edges, children[p]...)
			}
			frontier = settle(edges)
		}
	}
	if len(fail) > 0 {
		if err := q.MarkUpstreamFailed(ctx, fail); err != nil {
			return err
		}
	}
	if len(done) == 0 {
		return nil
	}
	rows, err := q.DecrementTasks(ctx, done)
	if err != nil {
		return err
	}
	return releaseCounted(ctx, q, tx, a, rows)
}

// shallowLevels is how many levels of a failure's descendants
// propagateFailure reads one by one before it reads the whole run's.
const shallowLevels = 2

// edge is a waiting child of a task, with the child's trigger rule.
type edge struct {
	child uuid.UUID
	rule  dag.TriggerRule
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

// promoteQueued starts the job's run that overlap: queue held back. A
// firing transaction that saw the finishing run as active may be holding
// one back at this very moment, not yet visible here (READ COMMITTED);
// PromoteStranded, run by the reaper, starts such a run.
func promoteQueued(ctx context.Context, tx pgx.Tx, a *Applier, jobID uuid.UUID) error {
	q := store.New(tx)
	next, err := q.PromoteQueuedRun(ctx, jobID)
	if store.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	roots, err := q.RootTasks(ctx, next)
	if err != nil {
		return err
	}
	ready := make([]dispatch.Ready, len(roots))
	for i, t := range roots {
		ready[i] = dispatch.NextAttempt(t.ID, t.TenantID, t.Queue, t.Priority, 0)
	}
	return releaseWaiting(ctx, q, tx, a, ready)
}

// LeaseExpired is the result of an attempt whose lease lapsed.
func LeaseExpired(why string) executor.Result {
	return executor.Result{ExitReason: executor.ReasonLeaseExpired, FailureClass: executor.ClassSystem, Retryable: true, Error: why}
}

// PromoteStranded starts, for up to batch jobs, the run that overlap: queue
// holds back while no run of the job is active any more (see
// promoteQueued). It returns how many it started.
func (a *Applier) PromoteStranded(ctx context.Context, tx pgx.Tx, batch int) (int, error) {
	jobs, err := store.New(tx).JobsWithStrandedQueuedRuns(ctx, int32(batch))
	if err != nil {
		return 0, err
	}
	for _, j := range jobs {
		if err := promoteQueued(ctx, tx, a, j); err != nil {
			return 0, err
		}
	}
	return len(jobs), nil
}

// ExpireLeases fails the running attempts whose lease lapsed (their worker
// died or stalled) as lease_expired: each task's fencing token moves on, so
// the old worker's late report is rejected, and the task retries or is
// dead-lettered as any failure would. It returns how many it expired.
func (a *Applier) ExpireLeases(ctx context.Context, tx pgx.Tx, batch int) (int, error) {
	q := store.New(tx)
	rows, err := q.ExpiredLeases(ctx, int32(batch))
	if err != nil {
		return 0, err
	}
	for _, t := range rows {
		_, err := a.FinishAttempt(ctx, tx, Report{TaskID: t.ID, FencingToken: t.FencingToken, Expired: true,
			Result: LeaseExpired("the worker stopped renewing the task's lease")})
		if err != nil {
			return 0, err
		}
	}
	return len(rows), nil
}

// retryAt is when the next attempt of a task may start: after the step's
// backoff, or at once after a lapsed lease. The lease TTL has already been
// waited then, and a River job scheduled in the future waits for River's
// leader to promote it (every 5 s, and a new leader first when the dead
// worker was the leader: 18 s measured), not for its instant.
