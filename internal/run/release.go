package run

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/store"
)

// Releasing the tasks below a finished one: children whose parents all
// allow it go to their worker pools; descendants of a failure fail upstream.

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
