package run

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// MaxCancelsPerTx bounds the runs one transaction cancels: the ones asked
// for, and the child runs below them (their job steps' children, and
// theirs) up to this many in all. The child runs past it are written to
// run_cancels, which the scheduler of their shard takes (CancelPending):
// a tree of 10,000 runs is cancelled in about a hundred short
// transactions, its root at once.
const MaxCancelsPerTx = 100

// FailpointCancelsTx is hit in the transaction of CancelPending once it
// has cancelled its runs, before it commits.
const FailpointCancelsTx = "run/cancels-tx"

// ReasonParentCancelled is why a child run cancelled with its parent was.
const ReasonParentCancelled = "cancelled: the run of the step that started it was cancelled"

// Cancel cancels runs that have not finished, with their unfinished tasks;
// running attempts are closed as cancelled and their later reports will be
// stale. The child runs of their job steps, and theirs, are cancelled with
// them, or later (MaxCancelsPerTx). It returns the runs it cancelled.
func (a *Applier) Cancel(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, reason string) ([]uuid.UUID, error) {
	count, _ := store.TxValue(tx, "run.cancels", func() any { return new(int) })
	return a.cancel(ctx, tx, ids, reason, false, count.(*int))
}

// cancel is Cancel, counting in done the runs the transaction cancelled;
// with done nil, every child run is left for later. withParent says the
// runs are child runs whose steps were cancelled: their ends end no step,
// and no event of them is written.
func (a *Applier) cancel(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, reason string, withParent bool, done *int) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ap := a.in(tx)
	cancelled, err := ap.q.CancelRuns(ctx, store.CancelRunsParams{Ids: ids, Reason: reason, ParentCancelled: withParent})
	if err != nil || len(cancelled) == 0 {
		return cancelled, err
	}
	for range cancelled {
		a.finished(tx, lifecycle.RunCancelled)
	}
	tasks, err := ap.q.CancelTasksOfRuns(ctx, store.CancelTasksOfRunsParams{RunIds: cancelled, ExitReason: executor.ReasonCancelled, FailureClass: executor.ClassUser, Error: reason})
	if err != nil {
		return nil, err
	}
	taskIDs := make([]uuid.UUID, len(tasks))
	touched := map[flowKey]int{}
	for i, t := range tasks {
		taskIDs[i] = t.ID
		addKeys(touched, t.TenantID, t.FlowKeys, t.FlowLimits)
		if t.HeldOn != "" { // a held task that goes lets the next on its key be looked at
			addKeys(touched, t.TenantID, []string{t.HeldOn}, []int32{1})
		}
	}
	if err := ap.touch(ctx, touched); err != nil {
		return nil, err
	}
	room := 0
	if done != nil {
		*done += len(cancelled)
		room = max(MaxCancelsPerTx-*done, 0)
	}
	return cancelled, ap.cancelChildren(ctx, taskIDs, room, done)
}

// cancelChildren cancels up to room unfinished child runs of tasks
// (cancelled with their run) and writes the rest to run_cancels.
func (ap *applying) cancelChildren(ctx context.Context, tasks []uuid.UUID, room int, done *int) error {
	if len(tasks) == 0 {
		return nil
	}
	open, err := ap.q.OpenChildRunsWithShard(ctx, tasks)
	if err != nil || len(open) == 0 {
		return err
	}
	now := min(room, len(open))
	if later := open[now:]; len(later) > 0 {
		p := store.InsertRunCancelsParams{}
		for _, r := range later {
			p.RunIds = append(p.RunIds, r.ID)
			p.Shards = append(p.Shards, r.Shard)
			p.Reasons = append(p.Reasons, ReasonParentCancelled)
		}
		if err := ap.q.InsertRunCancels(ctx, p); err != nil {
			return err
		}
	}
	ids := make([]uuid.UUID, now)
	for i, r := range open[:now] {
		ids[i] = r.ID
	}
	_, err = ap.cancel(ctx, ap.tx, ids, ReasonParentCancelled, true, done)
	return err
}

// CancelPending cancels at most batch runs of shards that a cancel left
// for later (run_cancels, oldest first, FOR UPDATE SKIP LOCKED), in tx:
// the scheduler's, fenced by those shards. It waits for nothing: a run, or
// a task of it, that another transaction holds (a worker's report of its
// last task, which locks the task and then the run, the other way round)
// is left for a later pass, and the child runs of the runs it cancels are
// left for later too. A run that ended meanwhile, was pruned, or whose
// step was released again (its parent run retried: the step attached to
// it again) is passed by. It returns how many it took.
func (a *Applier) CancelPending(ctx context.Context, tx pgx.Tx, shards []int32, batch int32) (int, error) {
	q := store.New(tx)
	taken, err := q.TakeRunCancels(ctx, store.TakeRunCancelsParams{Shards: shards, Batch: batch})
	if err != nil || len(taken) == 0 {
		return 0, err
	}
	ids := make([]uuid.UUID, len(taken))
	reasons := make(map[uuid.UUID]string, len(taken))
	for i, c := range taken {
		ids[i] = c.RunID
		reasons[c.RunID] = c.Reason
	}
	ids = sortedUnique(ids)
	runs, err := q.LockRunsToCancel(ctx, ids)
	if err != nil {
		return 0, err
	}
	held := make([]uuid.UUID, len(runs))
	for i, r := range runs {
		held[i] = r.ID
	}
	locked := map[uuid.UUID]int{}
	if len(held) > 0 {
		ofRuns, err := q.LockOpenTasksOfRuns(ctx, held)
		if err != nil {
			return 0, err
		}
		for _, r := range ofRuns {
			locked[r]++
		}
	}
	byReason := map[string][]uuid.UUID{}
	for _, r := range runs {
		if locked[r.ID] == int(r.OpenTasks) { // every open task of it held: nothing to wait for
			byReason[reasons[r.ID]] = append(byReason[reasons[r.ID]], r.ID)
		}
	}
	for reason, runs := range byReason {
		if _, err := a.cancel(ctx, tx, runs, reason, true, nil); err != nil {
			return 0, err
		}
	}
	ended, err := q.NoLongerToCancel(ctx, ids)
	if err != nil {
		return 0, err
	}
	if err := q.DeleteRunCancels(ctx, ended); err != nil {
		return 0, err
	}
	a.Failpoints.Hit(FailpointCancelsTx)
	return len(taken), nil
}
