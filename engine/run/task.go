package run

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/dispatch"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/store"
)

// Attempt is a started attempt: what the executor needs, and the fencing
// token its report must carry.
type Attempt struct {
	Call    executor.Call
	Timeout time.Duration
}

// StartAttempt starts attempt number attempt of a task for worker, with a
// lease of ttl, in one statement. It returns nil when the River job is
// stale (the task was cancelled, or this attempt already ran).
func StartAttempt(ctx context.Context, db store.DBTX, taskID uuid.UUID, attempt int, worker string, ttl time.Duration) (*Attempt, error) {
	t, err := store.New(db).StartAttempt(ctx, store.StartAttemptParams{
		ID: taskID, PrevAttempt: int32(attempt - 1), Worker: worker, TtlSeconds: ttl.Seconds(), AttemptID: uuid.Must(uuid.NewV7()),
	})
	if store.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var spec dag.JobSpec
	if err := json.Unmarshal(t.Spec, &spec); err != nil {
		return nil, fmt.Errorf("run %s: spec: %w", t.RunID, err)
	}
	for i, st := range spec.Steps {
		if st.Name != t.Step {
			continue
		}
		return &Attempt{
			Timeout: spec.Effective(i).Timeout,
			Call: executor.Call{
				RunID: t.RunID, TaskID: t.ID, JobID: t.JobID, Namespace: t.Namespace, Job: t.Name, Step: t.Step,
				Attempt: int(t.Attempt), FencingToken: t.FencingToken, ScheduledFor: t.ScheduledFor, Trigger: t.Trigger,
				Payload: json.RawMessage(st.Payload), Executor: st.Run,
			},
		}, nil
	}
	return nil, fmt.Errorf("run %s: step %q is not in its job version", t.RunID, t.Step)
}

// Report is how a worker says an attempt ended.
type Report struct {
	TaskID       uuid.UUID
	FencingToken int64
	Result       executor.Result
	// Expired: the report is the reaper's (the lease lapsed), not the
	// worker's; if the token moved on meanwhile there is nothing to record.
	Expired bool
}

// FinishAttempt records an attempt's outcome if its fencing token is still
// the task's (invariant 5), in one transaction with its consequences: on
// success the children whose last parent this was are released
// (invariant 4); on failure the task retries after a backoff or, out of
// attempts or not retryable, is dead-lettered and its waiting descendants
// fail upstream; when the run has nothing left to do it finishes, and a run
// held back by overlap: queue starts. A stale report is recorded on its
// attempt and changes nothing else; FinishAttempt then returns false.
func FinishAttempt(ctx context.Context, tx pgx.Tx, d *dispatch.Dispatcher, r Report) (bool, error) {
	q := store.New(tx)
	res := r.Result
	// Lock order: the run, then its tasks (FinishTask, children).
	if _, err := q.LockRunOfTask(ctx, r.TaskID); err != nil {
		if store.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	status := TaskSucceeded
	var set dag.Settings
	var nextAttempt int
	if !res.OK {
		status = TaskDeadLettered
		if res.Retryable {
			pol, err := q.TaskRetryPolicy(ctx, r.TaskID)
			if err != nil {
				return false, err
			}
			var ok bool
			if set, ok = stepSettings(pol.Spec, pol.Step); ok && int(pol.Attempt) < set.MaxAttempts {
				status, nextAttempt = TaskRetrying, int(pol.Attempt)+1
			}
		}
	}
	t, err := q.FinishTask(ctx, store.FinishTaskParams{ID: r.TaskID, FencingToken: r.FencingToken, Status: status, LastError: res.Error})
	if store.IsNotFound(err) {
		if r.Expired {
			return false, nil
		}
		outcome := "succeeded"
		if !res.OK {
			outcome = "failed"
		}
		return false, q.RecordLateReport(ctx, store.RecordLateReportParams{TaskID: r.TaskID, FencingToken: r.FencingToken, Outcome: outcome, Error: res.Error})
	}
	if err != nil {
		return false, err
	}
	outcome := "succeeded"
	if !res.OK {
		outcome = "failed"
	}
	if err := q.FinishAttempt(ctx, store.FinishAttemptParams{
		TaskID: r.TaskID, FencingToken: r.FencingToken, Outcome: outcome, ExitReason: res.ExitReason,
		FailureClass: res.FailureClass, Error: res.Error, Output: res.Output,
	}); err != nil {
		return false, err
	}
	switch status {
	case TaskSucceeded:
		if err := releaseChildren(ctx, q, tx, d, r.TaskID); err != nil {
			return false, err
		}
	case TaskRetrying:
		at := t.Now.Add(Backoff(set.Initial, set.Max, nextAttempt-1))
		if err := d.Release(ctx, tx, []dispatch.Ready{{TaskID: r.TaskID, Tenant: t.TenantID, Queue: t.Queue, Priority: int(t.Priority), Attempt: nextAttempt, NotBefore: at}}); err != nil {
			return false, err
		}
		return true, nil
	case TaskDeadLettered:
		if _, err := q.UpstreamFailDescendants(ctx, r.TaskID); err != nil {
			return false, err
		}
		if err := releaseChildren(ctx, q, tx, d, r.TaskID); err != nil {
			return false, err
		}
	}
	return true, FinishRunIfDone(ctx, tx, d, t.RunID)
}

// releaseChildren counts a finished parent for each waiting child and
// releases the children whose count reaches zero. After a failure only
// all_done children are still waiting (the others failed upstream).
func releaseChildren(ctx context.Context, q *store.Queries, tx pgx.Tx, d *dispatch.Dispatcher, parent uuid.UUID) error {
	children, err := q.DecrementChildren(ctx, parent)
	if err != nil {
		return err
	}
	var ids []uuid.UUID
	var ready []dispatch.Ready
	for _, c := range children {
		if c.ParentsRemaining == 0 {
			ids = append(ids, c.ID)
			ready = append(ready, dispatch.Ready{TaskID: c.ID, Tenant: c.TenantID, Queue: c.Queue, Priority: int(c.Priority), Attempt: 1})
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if err := q.ReleaseTasks(ctx, ids); err != nil {
		return err
	}
	return d.Release(ctx, tx, ready)
}

// FinishRunIfDone derives a run's status from its tasks once none is left
// to run: succeeded when all succeeded, else dead_lettered, cancelled or
// failed. A finished run lets the job's queued run (overlap: queue) start.
func FinishRunIfDone(ctx context.Context, tx pgx.Tx, d *dispatch.Dispatcher, runID uuid.UUID) error {
	q := store.New(tx)
	counts, err := q.RunTaskCounts(ctx, runID)
	if err != nil {
		return err
	}
	n := map[string]int{}
	total := 0
	for _, c := range counts {
		n[c.Status] = int(c.N)
		total += int(c.N)
	}
	if n[TaskWaiting]+n[TaskQueued]+n[TaskRunning]+n[TaskRetrying] > 0 {
		return nil
	}
	status, reason := StatusSucceeded, ""
	switch {
	case n[TaskSucceeded] == total:
	case n[TaskDeadLettered] > 0:
		status, reason = StatusDeadLettered, fmt.Sprintf("%d task(s) dead-lettered", n[TaskDeadLettered])
	case n[TaskCancelled] > 0:
		status = StatusCancelled
	default:
		status, reason = StatusFailed, fmt.Sprintf("%d task(s) failed upstream", n[TaskUpstreamFailed])
	}
	jobID, err := q.FinishRun(ctx, store.FinishRunParams{ID: runID, Status: status, Reason: reason})
	if store.IsNotFound(err) {
		return nil // finished already (cancelled)
	}
	if err != nil {
		return err
	}
	return promoteQueued(ctx, tx, d, jobID)
}

// promoteQueued starts the job's run that overlap: queue held back.
func promoteQueued(ctx context.Context, tx pgx.Tx, d *dispatch.Dispatcher, jobID uuid.UUID) error {
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
	ids := make([]uuid.UUID, len(roots))
	ready := make([]dispatch.Ready, len(roots))
	for i, t := range roots {
		ids[i] = t.ID
		ready[i] = dispatch.Ready{TaskID: t.ID, Tenant: t.TenantID, Queue: t.Queue, Priority: int(t.Priority), Attempt: 1}
	}
	if err := q.ReleaseTasks(ctx, ids); err != nil {
		return err
	}
	return d.Release(ctx, tx, ready)
}

// ExpireLeases fails the running attempts whose lease lapsed (their worker
// died or stalled) as lease_expired: each task's fencing token moves on, so
// the old worker's late report is rejected, and the task retries or is
// dead-lettered as any failure would. It returns how many it expired.
func ExpireLeases(ctx context.Context, tx pgx.Tx, d *dispatch.Dispatcher, batch int) (int, error) {
	q := store.New(tx)
	rows, err := q.ExpiredLeases(ctx, int32(batch))
	if err != nil {
		return 0, err
	}
	for _, t := range rows {
		_, err := FinishAttempt(ctx, tx, d, Report{TaskID: t.ID, FencingToken: t.FencingToken, Expired: true, Result: executor.Result{
			ExitReason: executor.ReasonLeaseExpired, FailureClass: executor.ClassSystem, Retryable: true,
			Error: "the worker stopped renewing the task's lease",
		}})
		if err != nil {
			return 0, err
		}
	}
	return len(rows), nil
}

func stepSettings(specJSON []byte, step string) (dag.Settings, bool) {
	var spec dag.JobSpec
	if err := json.Unmarshal(specJSON, &spec); err != nil {
		return dag.Settings{}, false
	}
	for i, st := range spec.Steps {
		if st.Name == step {
			return spec.Effective(i), true
		}
	}
	return dag.Settings{}, false
}

// Backoff is the wait before retry number n (1 for the first retry):
// exponential from initial, capped at max, with full jitter, never below
// initial.
func Backoff(initial, maxWait time.Duration, n int) time.Duration {
	ceil := initial
	for i := 1; i < n && ceil < maxWait; i++ {
		ceil *= 2
	}
	ceil = min(ceil, maxWait)
	if ceil <= initial {
		return initial
	}
	return initial + time.Duration(rand.Int64N(int64(ceil-initial)))
}
