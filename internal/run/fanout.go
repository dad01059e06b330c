package run

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

// Fan-out (for_each, docs/dynamic-workflows.md): a step's task is its
// group. Where the group would be released, in that transaction, its
// list is evaluated and one item task written per element (STEP[i]); the
// first max_parallel of them are released and the group is expanded.
// Each item's end is counted in its group in the transaction that ends
// the item, which releases the next held item and, at the last, ends the
// group by its min_success and settles what is below it as any task's
// end does. One transaction each way: a crash leaves a group waiting
// with no item, or expanded with all of them.

// FailpointExpanded is hit when a transaction has written the items of
// the groups it expands, expanded them and released their first items,
// before it commits.
const FailpointExpanded = "run/expanded"

// FailpointItemCounted is hit when a report's transaction has counted an
// item's end in its group, before it commits.
const FailpointItemCounted = "run/item-counted"

// ReasonEmptyList is why a group whose list is empty was skipped.
const ReasonEmptyList = "skipped: for_each: the list is empty"

// expand expands groups (candidates whose step fans out, released: no
// condition, or a true one), reading their runs and what their lists
// read: two queries for the batch, then the writes. A list that cannot
// be evaluated (or passes MaxItems) dead-letters its group and an empty
// one skips it; what that ends settles as release's verdicts do.
func (ap *applying) expand(ctx context.Context, groups []candidate) error {
	v := verdicts{holdsRuns: map[uuid.UUID]bool{}}
	byRun, got, err := ap.runsOf(ctx, groups)
	if err != nil {
		return err
	}
	var todo []pending
	var outputs outputsToRead
	for _, c := range groups {
		r, ok := byRun[c.run]
		if !ok {
			return fmt.Errorf("task %s: run %s not found", c.ready.TaskID, c.run)
		}
		spec := got[specKey{r.JobID, r.JobVersion}]
		v.holdsRuns[c.run] = spec.HoldsRuns()
		idx := spec.stepIndex(c.step)
		x := spec.exprs.Step(c.step)
		switch {
		case spec.exprsErr != nil:
			v.fail = append(v.fail, verdict{c, "for_each: the job version's expressions do not compile: " + spec.exprsErr.Error()})
			continue
		case idx < 0 || !x.FansOut():
			v.fail = append(v.fail, verdict{c, fmt.Sprintf("for_each: step %q of the run's job version does not fan out", c.step)})
			continue
		}
		todo = append(todo, pending{c, r, &spec.Steps[idx], x})
		outputs.add(c.run, x.ForEachReads.Steps)
	}
	// A group expanded before (its run retried) keeps its items: those
	// that did not succeed run again, its list is not evaluated again.
	ids := make([]uuid.UUID, len(todo))
	for i, p := range todo {
		ids[i] = p.cand.ready.TaskID
	}
	var before []store.ExpandedBeforeRow
	if len(ids) > 0 {
		if before, err = ap.q.ExpandedBefore(ctx, ids); err != nil {
			return err
		}
	}
	if len(before) > 0 {
		again := make(map[uuid.UUID]store.ExpandedBeforeRow, len(before))
		for _, b := range before {
			again[b.ID] = b
		}
		var reopen []pending
		todo = slices.DeleteFunc(todo, func(p pending) bool {
			if _, ok := again[p.cand.ready.TaskID]; ok {
				reopen = append(reopen, p)
				return true
			}
			return false
		})
		if err := ap.reopenGroups(ctx, reopen, again); err != nil {
			return err
		}
	}
	if err := outputs.load(ctx, ap.q); err != nil {
		return err
	}
	// Items are tasks the tenant keeps: held to its max_tasks quota, read
	// in this transaction (read committed: it conflicts with no writer).
	tenants := make([]uuid.UUID, len(todo))
	for i, p := range todo {
		tenants[i] = p.cand.ready.Tenant
	}
	rooms, err := usage.RunRooms(ctx, ap.q, tenants)
	if err != nil {
		return err
	}
	bounds, err := ap.q.ItemsPerStep(ctx, tenants)
	if err != nil {
		return err
	}
	maxItems := make(map[uuid.UUID]int, len(bounds)) // a tenant's own bound; others take dag.MaxItems
	for _, b := range bounds {
		maxItems[b.ID] = int(b.MaxItemsPerStep)
	}
	spent := budgets{} // a run's lists share one cost limit, as conditions do
	var items store.InsertItemsParams
	var expanded store.ExpandGroupsParams
	var first []dispatch.Ready
	added := usage.Delta{}
	for _, p := range todo {
		r := p.run
		vars := outputs.vars(runOfRow(r, p.cand.ready.Attempt), p.exprs.ForEachReads.Steps, spent.of(r.ID))
		limit := dag.MaxItems
		if n, ok := maxItems[p.cand.ready.Tenant]; ok {
			limit = n
		}
		list, err := p.exprs.Items(vars, limit)
		switch {
		case err != nil:
			v.fail = append(v.fail, verdict{p.cand, err.Error()})
			continue
		case len(list) == 0:
			v.skip = append(v.skip, verdict{p.cand, ReasonEmptyList})
			continue
		}
		if err := rooms.Add(p.cand.ready.Tenant, usage.Usage{Tasks: int64(len(list))}); err != nil {
			v.fail = append(v.fail, verdict{p.cand, "for_each: " + err.Error()})
			continue
		}
		g := p.cand.ready
		release := len(list)
		if p.step.MaxParallel > 0 {
			release = min(release, p.step.MaxParallel)
		}
		for i, item := range list {
			id := uuid.Must(uuid.NewV7())
			items.Ids = append(items.Ids, id)
			items.GroupIds = append(items.GroupIds, g.TaskID)
			items.Steps = append(items.Steps, dag.ItemStep(p.cand.step, i))
			items.Items = append(items.Items, string(item))
			items.ItemIndexes = append(items.ItemIndexes, int32(i))
			if i < release {
				first = append(first, dispatch.NextAttempt(id, g.Tenant, g.Queue, int32(g.Priority), 0))
			}
		}
		expanded.Ids = append(expanded.Ids, g.TaskID)
		expanded.Counts = append(expanded.Counts, int32(len(list)))
		added.Add(g.Tenant, r.Shard, usage.Usage{Tasks: int64(len(list))})
		expanded.Held = append(expanded.Held, int32(len(list)-release))
	}
	if len(expanded.Ids) > 0 {
		if err := ap.addItemsUsage(ctx, added); err != nil {
			return err
		}
		if err := ap.q.InsertItems(ctx, items); err != nil {
			return err
		}
		moved, err := ap.q.ExpandGroups(ctx, expanded)
		if err != nil {
			return err
		}
		if len(moved) != len(expanded.Ids) { // a caller's bug: a group released twice
			return fmt.Errorf("expanding %d fan-out groups: %d were waiting", len(expanded.Ids), len(moved))
		}
		if err := ap.releaseWaiting(ctx, first); err != nil {
			return err
		}
		ap.Failpoints.Hit(FailpointExpanded)
	}
	return ap.settle(ctx, v)
}

// addItemsUsage counts what tx's items add to their tenants' tasks:
// summed over the transaction and written once, just before it commits,
// in key order, so that the usage rows many transactions share are held
// the shortest time and locked in one order (with a tx not from
// store.InRawTx, written now).
func (ap *applying) addItemsUsage(ctx context.Context, add usage.Delta) error {
	d, fresh := store.TxValue(ap.tx, "run.items-usage", func() any { return usage.Delta{} })
	delta := d.(usage.Delta)
	for k, u := range add {
		delta.Add(k.Tenant, k.Shard, u)
	}
	if !fresh {
		return nil
	}
	return store.BeforeCommit(ctx, ap.tx, func(ctx context.Context) error { return delta.WriteRuns(ctx, store.New(ap.tx)) })
}

// pending is a group to expand: its candidate, run, step and expressions.
type pending struct {
	cand  candidate
	run   store.ConditionRunsRow
	step  *dag.Step
	exprs *dag.StepExprs
}

// reopenGroups expands again groups of a retried run that were expanded
// before: their items that did not succeed wait again and the first
// max_parallel of them are released; a group with none left ends at once
// (countItemEnds).
func (ap *applying) reopenGroups(ctx context.Context, groups []pending, before map[uuid.UUID]store.ExpandedBeforeRow) error {
	if len(groups) == 0 {
		return nil
	}
	var p store.ReopenGroupsParams
	release := map[uuid.UUID]int32{}
	for _, g := range groups {
		id := g.cand.ready.TaskID
		b := before[id]
		open := b.ItemsTotal - b.ItemsSucceeded
		n := open
		if g.step.MaxParallel > 0 {
			n = min(n, int32(g.step.MaxParallel))
		}
		p.Ids = append(p.Ids, id)
		p.Opens = append(p.Opens, open)
		p.Held = append(p.Held, open-n)
		release[id] = n
	}
	if err := ap.q.ReopenItems(ctx, p.Ids); err != nil {
		return err
	}
	moved, err := ap.q.ReopenGroups(ctx, p)
	if err != nil {
		return err
	}
	if len(moved) != len(p.Ids) {
		return fmt.Errorf("expanding %d fan-out groups again: %d were waiting", len(p.Ids), len(moved))
	}
	var next []dispatch.Ready
	none := map[uuid.UUID]*itemEnds{}
	for i, id := range p.Ids {
		if p.Opens[i] == 0 {
			none[id] = &itemEnds{}
			continue
		}
		if next, err = ap.appendHeld(ctx, next, id, release[id]); err != nil {
			return err
		}
	}
	if err := ap.releaseWaiting(ctx, next); err != nil {
		return err
	}
	return ap.countItemEnds(ctx, none)
}

// appendHeld appends to ready the next n held items of group (lowest
// index first), each for its next attempt.
func (ap *applying) appendHeld(ctx context.Context, ready []dispatch.Ready, group uuid.UUID, n int32) ([]dispatch.Ready, error) {
	held, err := ap.q.HeldItems(ctx, store.HeldItemsParams{GroupID: group, MaxItems: n})
	if err != nil {
		return ready, err
	}
	for _, h := range held {
		ready = append(ready, dispatch.NextAttempt(h.ID, h.TenantID, h.Queue, h.Priority, h.Attempt))
	}
	return ready, nil
}

// itemEnds are the ends of items of one group, in one transaction.
type itemEnds struct{ succeeded, failed int32 }

// countItemEnds counts ended items in their groups (succeeded, or
// dead-lettered) in the transaction that ended them, their runs locked:
// one statement for the batch. While a group has others open, held items
// (max_parallel) are released in the ended ones' place; a group whose
// last item ended ends by its step's min_success (groupEnded).
func (ap *applying) countItemEnds(ctx context.Context, ends map[uuid.UUID]*itemEnds) error {
	if len(ends) == 0 {
		return nil
	}
	var p store.CountItemEndsParams
	for _, g := range slices.SortedFunc(maps.Keys(ends), func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) }) {
		p.Ids = append(p.Ids, g)
		p.Succeeded = append(p.Succeeded, ends[g].succeeded)
		p.Failed = append(p.Failed, ends[g].failed)
	}
	groups, err := ap.q.CountItemEnds(ctx, p)
	if err != nil {
		return err
	}
	ap.Failpoints.Hit(FailpointItemCounted)
	var next []dispatch.Ready
	for _, g := range groups {
		if g.ItemsOpen > 0 && g.Release > 0 {
			if next, err = ap.appendHeld(ctx, next, g.ID, g.Release); err != nil {
				return err
			}
		}
	}
	if err := ap.releaseWaiting(ctx, next); err != nil {
		return err
	}
	for _, g := range groups {
		if g.ItemsOpen == 0 {
			if err := ap.groupEnded(ctx, g); err != nil {
				return err
			}
		}
	}
	return nil
}

// groupEnded ends a group whose items all ended, by its step's
// min_success (lifecycle.GroupEnded); what is below it settles, and the
// run finishes when nothing else is left.
func (ap *applying) groupEnded(ctx context.Context, g store.CountItemEndsRow) error {
	runs, err := ap.q.ConditionRuns(ctx, []uuid.UUID{g.RunID})
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("fan-out %s: run %s not found", g.ID, g.RunID)
	}
	spec, err := specs.get(ctx, ap.tx, runs[0].JobID, runs[0].JobVersion)
	if err != nil {
		return err
	}
	need := int(g.ItemsTotal)
	if idx := spec.stepIndex(g.Step); idx >= 0 {
		need = spec.Steps[idx].MinSuccess.Need(need)
	}
	status, reason := lifecycle.GroupEnded(int(g.ItemsTotal), int(g.ItemsSucceeded), need)
	if _, err := ap.q.EndGroup(ctx, store.EndGroupParams{ID: g.ID, Status: status, Reason: reason}); err != nil {
		return err
	}
	if status == lifecycle.TaskSucceeded {
		err = ap.releaseChildren(ctx, g.ID)
	} else {
		err = ap.propagate(ctx, g.RunID, g.ID, status)
	}
	if err != nil {
		return err
	}
	return ap.finishRun(ctx, g.RunID, spec.HoldsRuns())
}
