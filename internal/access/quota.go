package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

// Bounds of a tenant's admission settings.
const (
	MaxWeight         = 1000
	MaxConcurrencyCap = 1_000_000
	MaxQueueQuotas    = 100
	// MaxItemsPerStepCap bounds a tenant's max_items_per_step.
	MaxItemsPerStepCap = 100_000
	// DefaultMaxRunsPerTree bounds the runs of a tree besides its root
	// (docs/workflows.md, "Trees of runs") for a tenant whose
	// max_runs_per_tree is 0; MaxRunsPerTreeCap bounds what it may be set
	// to.
	DefaultMaxRunsPerTree = 1000
	MaxRunsPerTreeCap     = 100_000
)

// Quota is a tenant's admission settings (see package dispatch): the
// tenant's MaxConcurrency caps its tasks holding slots in all queues (0:
// none), its Weight is its share against other tenants, Queues caps it per
// queue; and its storage quotas (package usage), with what it holds.
type Quota struct {
	Tenant  Tenant
	Queues  map[string]int32
	Storage usage.Limits
	Usage   usage.Usage
}

// QuotaChange changes some of a tenant's settings: a nil field is left as
// it is; a queue mapped to 0 loses its cap, a storage quota set to 0 is
// lifted.
type QuotaChange struct {
	MaxConcurrency *int32
	Weight         *int32
	Queues         map[string]int32
	// MaxItemsPerStep bounds a fan-out's items: 0 (the default, 10,000) to
	// MaxItemsPerStepCap.
	MaxItemsPerStep *int32
	// MaxRunsPerTree bounds the runs of a tree besides its root: 0 (the
	// default, 1,000) to MaxRunsPerTreeCap.
	MaxRunsPerTree *int32

	MaxJobs            *int64
	MaxDefinitionBytes *int64
	MaxRuns            *int64
	MaxTasks           *int64
	MaxHistoryBytes    *int64
	// MaxResources sets the quotas of the resources it names (a quantity
	// of 0 lifts one) and leaves the others (docs/resources.md).
	MaxResources *resources.Spec
}

// resourceQuota is q with change's resources set (0: lifted).
func resourceQuota(q resources.Vector, change resources.Spec) (resources.Vector, error) {
	v, err := resources.ParseWithin(change, resources.QuotaBounds) // a tenant's, over all its tasks
	if err != nil {
		var fe *resources.FieldError
		if errors.As(err, &fe) {
			return q, &dag.FieldError{Field: "max_resources." + fe.Field, Message: fe.Message}
		}
		return q, &dag.FieldError{Field: "max_resources", Message: err.Error()}
	}
	set := func(text string, cur *int64, n int64) {
		if text != "" {
			*cur = n
		}
	}
	set(change.CPU, &q.CPU, v.CPU)
	set(change.Memory, &q.Memory, v.Memory)
	set(change.GPU, &q.GPU, v.GPU)
	for name := range change.Custom {
		q = q.Sub(resources.Vector{Custom: map[string]int64{name: q.Get(name)}}).Add(resources.Vector{Custom: map[string]int64{name: v.Get(name)}})
	}
	return q, nil
}

func (c QuotaChange) storage() []struct {
	field string
	v     *int64
	dst   func(*usage.Limits) *int64
} {
	return []struct {
		field string
		v     *int64
		dst   func(*usage.Limits) *int64
	}{
		{"max_jobs", c.MaxJobs, func(l *usage.Limits) *int64 { return &l.Jobs }},
		{"max_definition_bytes", c.MaxDefinitionBytes, func(l *usage.Limits) *int64 { return &l.DefinitionBytes }},
		{"max_runs", c.MaxRuns, func(l *usage.Limits) *int64 { return &l.Runs }},
		{"max_tasks", c.MaxTasks, func(l *usage.Limits) *int64 { return &l.Tasks }},
		{"max_history_bytes", c.MaxHistoryBytes, func(l *usage.Limits) *int64 { return &l.HistoryBytes }},
	}
}

func (c QuotaChange) validate() error {
	storage := false
	for _, f := range c.storage() {
		if f.v == nil {
			continue
		}
		storage = true
		if *f.v < 0 || *f.v > usage.MaxLimit {
			return &dag.FieldError{Field: f.field, Message: fmt.Sprintf("%d: want 0 (no quota) to %d", *f.v, int64(usage.MaxLimit))}
		}
	}
	if c.MaxConcurrency == nil && c.Weight == nil && len(c.Queues) == 0 && !storage && c.MaxItemsPerStep == nil && c.MaxRunsPerTree == nil && c.MaxResources == nil {
		return &dag.FieldError{Field: "max_concurrency|weight|queues|max_jobs|max_definition_bytes|max_runs|max_tasks|max_history_bytes|max_items_per_step|max_runs_per_tree|max_resources", Message: "nothing to change: give at least one"}
	}
	if c.MaxResources != nil {
		if _, err := resourceQuota(resources.Vector{}, *c.MaxResources); err != nil {
			return err
		}
	}
	if c.MaxRunsPerTree != nil && (*c.MaxRunsPerTree < 0 || *c.MaxRunsPerTree > MaxRunsPerTreeCap) {
		return &dag.FieldError{Field: "max_runs_per_tree", Message: fmt.Sprintf("%d: want 0 (the default, %d) to %d", *c.MaxRunsPerTree, DefaultMaxRunsPerTree, MaxRunsPerTreeCap)}
	}
	if c.MaxItemsPerStep != nil && (*c.MaxItemsPerStep < 0 || *c.MaxItemsPerStep > MaxItemsPerStepCap) {
		return &dag.FieldError{Field: "max_items_per_step", Message: fmt.Sprintf("%d: want 0 (the default, %d) to %d", *c.MaxItemsPerStep, dag.MaxItems, MaxItemsPerStepCap)}
	}
	if c.MaxConcurrency != nil && (*c.MaxConcurrency < 0 || *c.MaxConcurrency > MaxConcurrencyCap) {
		return &dag.FieldError{Field: "max_concurrency", Message: fmt.Sprintf("%d: want 0 (no quota) to %d", *c.MaxConcurrency, MaxConcurrencyCap)}
	}
	if c.Weight != nil && (*c.Weight < 1 || *c.Weight > MaxWeight) {
		return &dag.FieldError{Field: "weight", Message: fmt.Sprintf("%d: want 1 to %d", *c.Weight, MaxWeight)}
	}
	if len(c.Queues) > MaxQueueQuotas {
		return &dag.FieldError{Field: "queues", Message: fmt.Sprintf("%d entries: at most %d", len(c.Queues), MaxQueueQuotas)}
	}
	for _, q := range slices.Sorted(maps.Keys(c.Queues)) {
		// The name as Go quotes it, cut short: it may be anything.
		field := fmt.Sprintf("queues[%.80q]", q)
		if err := dag.ValidateName(q); err != nil {
			return &dag.FieldError{Field: field, Message: "a queue name must start with a lowercase letter or digit and hold only a-z, 0-9, '-', '_' and '.', at most 63 characters"}
		}
		if n := c.Queues[q]; n < 0 || n > MaxConcurrencyCap {
			return &dag.FieldError{Field: field, Message: fmt.Sprintf("%d: want 0 (no cap) to %d", n, MaxConcurrencyCap)}
		}
	}
	return nil
}

// SetQuota changes a tenant's admission settings, audited in its trail
// (action set_quota, with the settings before and after). Admitters read
// them at every pass: the change applies without a restart. The caller's
// authority (system admin) is the API's to check. ErrNotFound for an
// unknown tenant.
func (k *Service) SetQuota(ctx context.Context, by Principal, tenant string, c QuotaChange) (Quota, error) {
	if tenant == "" {
		return Quota{}, &dag.FieldError{Field: "tenant", Message: "required"}
	}
	if err := c.validate(); err != nil {
		return Quota{}, err
	}
	var out Quota
	err := store.InTx(ctx, k.pool, func(q *store.Queries) error {
		t, err := q.LockTenantByName(ctx, tenant)
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: tenant %q", ErrNotFound, tenant)
		}
		if err != nil {
			return err
		}
		before, err := quotaOf(ctx, q, Tenant(t))
		if err != nil {
			return err
		}
		after := before
		after.Queues = maps.Clone(before.Queues)
		if c.MaxConcurrency != nil {
			after.Tenant.MaxConcurrency = *c.MaxConcurrency
		}
		if c.Weight != nil {
			after.Tenant.Weight = *c.Weight
		}
		if c.MaxItemsPerStep != nil {
			after.Tenant.MaxItemsPerStep = *c.MaxItemsPerStep
		}
		if c.MaxRunsPerTree != nil {
			after.Tenant.MaxRunsPerTree = *c.MaxRunsPerTree
		}
		for queue, n := range c.Queues {
			if n == 0 {
				delete(after.Queues, queue)
			} else {
				after.Queues[queue] = n
			}
		}
		if len(after.Queues) > MaxQueueQuotas {
			return &dag.FieldError{Field: "queues", Message: fmt.Sprintf("%d queue caps: at most %d per tenant", len(after.Queues), MaxQueueQuotas)}
		}
		for _, f := range c.storage() {
			if f.v != nil {
				*f.dst(&after.Storage) = *f.v
			}
		}
		if c.MaxResources != nil {
			v, err := resourceQuota(before.Tenant.ResourceQuota(), *c.MaxResources)
			if err != nil {
				return err
			}
			after.Tenant.MaxResources = nil
			if !v.IsZero() {
				after.Tenant.MaxResources, _ = json.Marshal(v)
			}
		}
		if err := q.SetTenantLimits(ctx, store.SetTenantLimitsParams{ID: t.ID, Weight: after.Tenant.Weight, MaxConcurrency: after.Tenant.MaxConcurrency,
			MaxItemsPerStep: after.Tenant.MaxItemsPerStep, MaxRunsPerTree: after.Tenant.MaxRunsPerTree, MaxResources: after.Tenant.MaxResources}); err != nil {
			return err
		}
		if err := usage.Set(ctx, q, t.ID, after.Storage); err != nil {
			return err
		}
		for queue, n := range c.Queues {
			if n == 0 {
				err = q.DeleteTenantQueueQuota(ctx, store.DeleteTenantQueueQuotaParams{TenantID: t.ID, Queue: queue})
			} else {
				err = q.SetTenantQueueQuota(ctx, store.SetTenantQueueQuotaParams{TenantID: t.ID, Queue: queue, MaxConcurrency: n})
			}
			if err != nil {
				return err
			}
		}
		b, _ := json.Marshal(quotaJSON(before))
		a, _ := json.Marshal(quotaJSON(after))
		out = after
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: t.ID, Actor: by.Actor().Name,
			Action: "set_quota", TargetKind: "tenant", TargetID: t.ID, TargetName: t.Name, Before: b, After: a})
	})
	return out, err
}

// GetQuota reads a tenant's admission settings.
func (k *Service) GetQuota(ctx context.Context, tenant string) (Quota, error) {
	if tenant == "" {
		return Quota{}, &dag.FieldError{Field: "tenant", Message: "required"}
	}
	q := store.New(k.pool)
	t, err := q.TenantRowByName(ctx, tenant)
	if store.IsNotFound(err) {
		return Quota{}, fmt.Errorf("%w: tenant %q", ErrNotFound, tenant)
	}
	if err != nil {
		return Quota{}, err
	}
	return quotaOf(ctx, q, Tenant(t))
}

func quotaOf(ctx context.Context, q *store.Queries, t Tenant) (Quota, error) {
	rows, err := q.TenantQueueQuotas(ctx, t.ID)
	if err != nil {
		return Quota{}, err
	}
	out := Quota{Tenant: t, Queues: map[string]int32{}}
	for _, r := range rows {
		out.Queues[r.Queue] = r.MaxConcurrency
	}
	out.Storage, out.Usage, err = usage.Get(ctx, q, t.ID)
	return out, err
}

func quotaJSON(q Quota) map[string]any {
	return map[string]any{"max_concurrency": q.Tenant.MaxConcurrency, "weight": q.Tenant.Weight, "queues": q.Queues, "max_items_per_step": q.Tenant.MaxItemsPerStep,
		"max_runs_per_tree": q.Tenant.MaxRunsPerTree,
		"max_jobs":          q.Storage.Jobs, "max_definition_bytes": q.Storage.DefinitionBytes, "max_runs": q.Storage.Runs, "max_history_bytes": q.Storage.HistoryBytes, "max_tasks": q.Storage.Tasks,
		"max_resources": q.Tenant.ResourceQuota().Spec()}
}
