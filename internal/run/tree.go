package run

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// Trees of runs (docs/workflows.md, "Trees of runs"): a run another run
// started (a job step's child, an after-trigger's run) belongs to the tree
// of the run no run started, its root; the runs of a tree besides its
// root are counted in run_trees and bounded by the tenant's
// max_runs_per_tree.

// trees is the count of some trees, locked in a transaction: take makes
// room for a run in one, Add writes what was taken.
type trees struct {
	count map[uuid.UUID]int // runs besides the root, as locked plus taken
	bound map[uuid.UUID]int // the tree's tenant's bound
	added map[uuid.UUID]int
}

// lockTrees locks the counts of the trees of roots (their tenants'
// given alike), creating the rows of new trees, in root order: after the
// jobs a transaction locks and before the runs (the scheduler's
// transactions are the only ones that take them).
func lockTrees(ctx context.Context, q *store.Queries, roots, tenants []uuid.UUID) (*trees, error) {
	t := &trees{count: map[uuid.UUID]int{}, bound: map[uuid.UUID]int{}, added: map[uuid.UUID]int{}}
	if len(roots) == 0 {
		return t, nil
	}
	tenantOf := make(map[uuid.UUID]uuid.UUID, len(roots))
	for i, r := range roots {
		tenantOf[r] = tenants[i]
	}
	sorted := make([]uuid.UUID, 0, len(tenantOf))
	for r := range tenantOf {
		sorted = append(sorted, r)
	}
	slices.SortFunc(sorted, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	ensure := store.EnsureRunTreesParams{RootRunIds: sorted, TenantIds: make([]uuid.UUID, len(sorted))}
	for i, r := range sorted {
		ensure.TenantIds[i] = tenantOf[r]
	}
	if err := q.EnsureRunTrees(ctx, ensure); err != nil {
		return nil, err
	}
	rows, err := q.LockRunTrees(ctx, sorted)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		t.count[r.RootRunID] = int(r.Runs)
	}
	bounds, err := q.TreeBounds(ctx, ensure.TenantIds)
	if err != nil {
		return nil, err
	}
	own := make(map[uuid.UUID]int, len(bounds))
	for _, b := range bounds {
		own[b.ID] = int(b.MaxRunsPerTree)
	}
	for r, tenant := range tenantOf {
		t.bound[r] = access.DefaultMaxRunsPerTree
		if n, ok := own[tenant]; ok {
			t.bound[r] = n
		}
	}
	return t, nil
}

// take makes room for one more run in root's tree, or says why there is
// none.
func (t *trees) take(root uuid.UUID) (string, bool) {
	if t.count[root] >= t.bound[root] {
		return fmt.Sprintf("the tree of run %s has %d runs besides its root; its tenant's max_runs_per_tree is %d (a loop of jobs calling and starting each other?)",
			root, t.count[root], t.bound[root]), false
	}
	t.count[root]++
	t.added[root]++
	return "", true
}

// write counts the runs taken.
func (t *trees) write(ctx context.Context, q *store.Queries) error {
	if len(t.added) == 0 {
		return nil
	}
	var p store.AddRunTreeRunsParams
	for r, n := range t.added {
		p.RootRunIds = append(p.RootRunIds, r)
		p.Ns = append(p.Ns, int32(n))
	}
	return q.AddRunTreeRuns(ctx, p)
}

// HoldToTrees makes room in their trees for the runs of runs that have a
// root and tasks (after-triggers' runs), in the caller's transaction; a
// run past its tree's bound is written skipped, with the reason, as an
// instant past a quota is. Call it after the jobs' locks and before
// Insert.
func (a *Applier) HoldToTrees(ctx context.Context, q *store.Queries, runs []New) error {
	var roots, tenants []uuid.UUID
	for _, r := range runs {
		if r.Root != uuid.Nil && withTasks(r) {
			roots, tenants = append(roots, r.Root), append(tenants, r.Job.Tenant)
		}
	}
	if len(roots) == 0 {
		return nil
	}
	t, err := lockTrees(ctx, q, roots, tenants)
	if err != nil {
		return err
	}
	for i := range runs {
		r := &runs[i]
		if r.Root == uuid.Nil || !withTasks(*r) {
			continue
		}
		if why, ok := t.take(r.Root); !ok {
			r.Status, r.Reason = lifecycle.RunSkipped, "upstream: "+why
		}
	}
	return t.write(ctx, q)
}
