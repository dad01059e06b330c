package run

import (
	"context"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// Releasing the tasks below a finished one: children whose parents all
// allow it go to their worker pools, or are skipped by their condition;
// descendants of a failure fail upstream, of a skip are skipped, each by
// its trigger rule (lifecycle.ParentEnded).

// candidate is a waiting task with nothing left to wait for.
type candidate struct {
	ready       dispatch.Ready
	run         uuid.UUID
	step        string
	conditional bool // its step has a condition (when), decided first
	fanOut      bool // its step fans out (for_each): it is expanded, not queued
	jobStep     bool // its step runs a job (run.job): it starts a child run, not queued
}

// releaseChildren counts succeeded parents for each waiting child and
// releases the children whose count reaches zero (invariant 4).
func (ap *applying) releaseChildren(ctx context.Context, parents ...uuid.UUID) error {
	if len(parents) == 0 {
		return nil
	}
	children, err := ap.q.DecrementChildren(ctx, parents)
	if err != nil {
		return err
	}
	counted := make([]store.DecrementTasksRow, len(children))
	for i, c := range children {
		counted[i] = store.DecrementTasksRow(c)
	}
	return ap.releaseCounted(ctx, counted)
}

// releaseCounted releases the tasks whose count of parents to wait for
// reached zero (after DecrementChildren or DecrementTasks), each for the
// attempt after its last: a task that ran before waits again below a
// parent that runs again (a retried all_done step, a rerun).
func (ap *applying) releaseCounted(ctx context.Context, tasks []store.DecrementTasksRow) error {
	var cands []candidate
	for _, c := range tasks {
		if c.ParentsRemaining == 0 {
			rd := dispatch.NextAttempt(c.ID, c.TenantID, c.Queue, c.Priority, c.Attempt).WithNeed(resources.FromColumns(c.ResCpu, c.ResMemory, c.ResGpu, c.ResCustom))
			cands = append(cands, candidate{rd, c.RunID, c.Step, c.Conditional, c.FanOut, c.JobStep})
		}
	}
	return ap.release(ctx, cands)
}

// release releases waiting tasks with nothing left to wait for: each
// whose step has a condition, concurrency keys or a rate limit is decided
// first (decideConditions), in this transaction; one whose condition is
// false is skipped, one whose condition or key cannot be evaluated is
// dead-lettered, and what they end settles below them; one with
// concurrency keys is held, and released by the promotion its transaction
// runs last (gateKeys); one with a rate limit gets its key (RateTasks),
// and waits for an admission pass to spend its token. A task whose step fans out is expanded (expand)
// instead of queued, and one whose step runs a job starts its child run
// (startCalls). A run that this ends is finished.
func (ap *applying) release(ctx context.Context, cands []candidate) error {
	var ready, conditional []candidate
	for _, c := range cands {
		if c.conditional {
			conditional = append(conditional, c)
		} else {
			ready = append(ready, c)
		}
	}
	var v verdicts
	if len(conditional) > 0 {
		var err error
		if v, err = ap.decideConditions(ctx, conditional); err != nil {
			return err
		}
		ap.Failpoints.Hit(FailpointConditionsDecided)
		if len(v.rated.Ids) > 0 {
			if err := ap.q.RateTasks(ctx, v.rated); err != nil {
				return err
			}
		}
		ready = append(ready, v.release...)
		if err := ap.gateKeys(ctx, v.keyed); err != nil {
			return err
		}
	}
	var rs []dispatch.Ready
	var groups, calls []candidate
	for _, c := range ready {
		switch {
		case c.fanOut:
			groups = append(groups, c)
		case c.jobStep:
			calls = append(calls, c)
		default:
			rs = append(rs, c.ready)
		}
	}
	if len(rs) > 0 {
		if err := ap.releaseWaiting(ctx, rs); err != nil {
			return err
		}
	}
	if len(groups) > 0 {
		if err := ap.expand(ctx, groups); err != nil {
			return err
		}
	}
	if len(calls) > 0 {
		if err := ap.startCalls(ctx, calls); err != nil {
			return err
		}
	}
	return ap.settle(ctx, v)
}

// settle writes the verdicts' skips and failures, settles what they end
// below them (propagate) and finishes the runs that this ends.
func (ap *applying) settle(ctx context.Context, v verdicts) error {
	if len(v.skip) == 0 && len(v.fail) == 0 {
		return nil
	}
	ended := map[uuid.UUID]bool{}
	for _, e := range []struct {
		list   []verdict
		status lifecycle.TaskStatus // skipped, or dead-lettered with the error
		write  func(ids []uuid.UUID, why []string) error
	}{
		{v.skip, lifecycle.TaskSkipped, func(ids []uuid.UUID, why []string) error {
			_, err := ap.q.SkipTasks(ctx, store.SkipTasksParams{Ids: ids, Reasons: why})
			return err
		}},
		{v.fail, lifecycle.TaskDeadLettered, func(ids []uuid.UUID, why []string) error {
			_, err := ap.q.FailConditions(ctx, store.FailConditionsParams{Ids: ids, Errors: why})
			return err
		}},
	} {
		if len(e.list) == 0 {
			continue
		}
		ids, why := make([]uuid.UUID, len(e.list)), make([]string, len(e.list))
		for i, c := range e.list {
			ids[i], why[i] = c.cand.ready.TaskID, c.why
		}
		if err := e.write(ids, why); err != nil {
			return err
		}
		for _, c := range e.list {
			ended[c.cand.run] = true
			if err := ap.propagate(ctx, c.cand.run, c.cand.ready.TaskID, e.status); err != nil {
				return err
			}
		}
	}
	for runID := range ended {
		if err := ap.finishRun(ctx, runID, v.holdsRuns[runID]); err != nil {
			return err
		}
	}
	return nil
}

// releaseWaiting moves waiting tasks to queued (those Direct admits,
// admitted) and releases them.
func (ap *applying) releaseWaiting(ctx context.Context, ready []dispatch.Ready) error {
	if len(ready) == 0 {
		return nil
	}
	if err := ap.Dispatcher.Direct(ctx, ap.tx, ready); err != nil {
		return err
	}
	p := store.ReleaseTasksParams{Admitted: []uuid.UUID{}}
	for _, r := range ready {
		p.Ids = append(p.Ids, r.TaskID)
		if r.Admitted {
			p.Admitted = append(p.Admitted, r.TaskID)
		}
	}
	if err := ap.q.ReleaseTasks(ctx, p); err != nil {
		return err
	}
	return ap.Dispatcher.Release(ctx, ap.tx, ready)
}

// propagate settles the descendants of a task of run that ended for good
// in status (dead_lettered, skipped): by each waiting child's trigger
// rule (lifecycle.ParentEnded), the child fails upstream or is skipped
// (and so on below it, as it ended), or counts the parent as done and is
// released when that was its last, so cleanup and notify steps run
// anyway. The first levels are read level by level (most ends stop there,
// having read only their own children); a cascade deeper than
// shallowLevels reads the run's waiting edges once and walks them in
// memory, so that no cascade costs a round trip per level.
func (ap *applying) propagate(ctx context.Context, run, ended uuid.UUID, status lifecycle.TaskStatus) error {
	var marked, done []uuid.UUID
	seen := map[uuid.UUID]bool{}
	cascade := lifecycle.TaskUpstreamFailed
	if status == lifecycle.TaskSkipped {
		cascade = lifecycle.TaskSkipped
	}
	// settle counts or marks one level's edges and returns the next level:
	// a marked child ends as cascade, which it passes on alike.
	settle := func(edges []edge, parentStatus lifecycle.TaskStatus) []uuid.UUID {
		var next []uuid.UUID
		for _, e := range edges {
			switch lifecycle.ParentEnded(parentStatus, e.rule) {
			case lifecycle.CountParent:
				done = append(done, e.child) // once per ended parent
			default:
				if !seen[e.child] {
					seen[e.child] = true
					next = append(next, e.child)
				}
			}
		}
		marked = append(marked, next...)
		return next
	}
	parentStatus := status
	frontier := []uuid.UUID{ended}
	for level := 0; len(frontier) > 0 && level < shallowLevels; level++ {
		rows, err := ap.q.WaitingChildren(ctx, frontier)
		if err != nil {
			return err
		}
		edges := make([]edge, len(rows))
		for i, r := range rows {
			edges[i] = edge{r.ChildID, r.TriggerRule}
		}
		frontier = settle(edges, parentStatus)
		parentStatus = cascade
	}
	if len(frontier) > 0 {
		rows, err := ap.q.WaitingEdgesOfRun(ctx, run)
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
			frontier = settle(edges, cascade)
		}
	}
	if len(marked) > 0 {
		var err error
		if cascade == lifecycle.TaskSkipped {
			p := store.SkipTasksParams{Ids: marked, Reasons: make([]string, len(marked))}
			for i := range p.Reasons {
				p.Reasons[i] = ReasonParentSkipped
			}
			_, err = ap.q.SkipTasks(ctx, p)
		} else {
			err = ap.q.MarkUpstreamFailed(ctx, marked)
		}
		if err != nil {
			return err
		}
	}
	if len(done) == 0 {
		return nil
	}
	rows, err := ap.q.DecrementTasks(ctx, done)
	if err != nil {
		return err
	}
	return ap.releaseCounted(ctx, rows)
}

// ReasonParentSkipped is why a task skipped by a parent's skip was.
const ReasonParentSkipped = "skipped: a parent was skipped (trigger rule all_success)"

// shallowLevels is how many levels of an end's descendants propagate
// reads one by one before it reads the whole run's.
const shallowLevels = 2

// edge is a waiting child of a task, with the child's trigger rule.
type edge struct {
	child uuid.UUID
	rule  dag.TriggerRule
}
