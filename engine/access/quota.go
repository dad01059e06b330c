package access

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/store"
)

// Bounds of a tenant's admission settings.
const (
	MaxWeight         = 1000
	MaxConcurrencyCap = 1_000_000
	MaxQueueQuotas    = 100
)

// Quota is a tenant's admission settings (see package dispatch): the
// tenant's MaxConcurrency caps its tasks holding slots in all queues (0:
// none), its Weight is its share against other tenants, Queues caps it per
// queue.
type Quota struct {
	Tenant Tenant
	Queues map[string]int32
}

// QuotaChange changes some of a tenant's settings: a nil field is left as
// it is; a queue mapped to 0 loses its cap.
type QuotaChange struct {
	MaxConcurrency *int32
	Weight         *int32
	Queues         map[string]int32
}

func (c QuotaChange) validate() error {
	if c.MaxConcurrency == nil && c.Weight == nil && len(c.Queues) == 0 {
		return &InvalidError{Field: "max_concurrency|weight|queues", Message: "nothing to change: give at least one"}
	}
	if c.MaxConcurrency != nil && (*c.MaxConcurrency < 0 || *c.MaxConcurrency > MaxConcurrencyCap) {
		return &InvalidError{Field: "max_concurrency", Message: fmt.Sprintf("%d: want 0 (no quota) to %d", *c.MaxConcurrency, MaxConcurrencyCap)}
	}
	if c.Weight != nil && (*c.Weight < 1 || *c.Weight > MaxWeight) {
		return &InvalidError{Field: "weight", Message: fmt.Sprintf("%d: want 1 to %d", *c.Weight, MaxWeight)}
	}
	if len(c.Queues) > MaxQueueQuotas {
		return &InvalidError{Field: "queues", Message: fmt.Sprintf("%d entries: at most %d", len(c.Queues), MaxQueueQuotas)}
	}
	for _, q := range slices.Sorted(maps.Keys(c.Queues)) {
		// The name as Go quotes it, cut short: it may be anything.
		field := fmt.Sprintf("queues[%.80q]", q)
		if err := dag.ValidateName(q); err != nil {
			return &InvalidError{Field: field, Message: "a queue name must start with a lowercase letter or digit and hold only a-z, 0-9, '-', '_' and '.', at most 63 characters"}
		}
		if n := c.Queues[q]; n < 0 || n > MaxConcurrencyCap {
			return &InvalidError{Field: field, Message: fmt.Sprintf("%d: want 0 (no cap) to %d", n, MaxConcurrencyCap)}
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
		return Quota{}, &InvalidError{Field: "tenant", Message: "required"}
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
		for queue, n := range c.Queues {
			if n == 0 {
				delete(after.Queues, queue)
			} else {
				after.Queues[queue] = n
			}
		}
		if len(after.Queues) > MaxQueueQuotas {
			return &InvalidError{Field: "queues", Message: fmt.Sprintf("%d queue caps: at most %d per tenant", len(after.Queues), MaxQueueQuotas)}
		}
		if err := q.SetTenantLimits(ctx, store.SetTenantLimitsParams{ID: t.ID, Weight: after.Tenant.Weight, MaxConcurrency: after.Tenant.MaxConcurrency}); err != nil {
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
		return Quota{}, &InvalidError{Field: "tenant", Message: "required"}
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
	return out, nil
}

func quotaJSON(q Quota) map[string]any {
	return map[string]any{"max_concurrency": q.Tenant.MaxConcurrency, "weight": q.Tenant.Weight, "queues": q.Queues}
}
