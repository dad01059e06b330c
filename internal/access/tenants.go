package access

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

// Tenant is an isolated customer or team.
type Tenant struct {
	ID             uuid.UUID
	Name           string
	Weight         int32
	MaxConcurrency int32 // 0: no quota
	CreatedAt      time.Time
	// MaxItemsPerStep bounds a fan-out's items (0: dag.MaxItems).
	MaxItemsPerStep int32
	// MaxRunsPerTree bounds the runs of a tree besides its root (0:
	// DefaultMaxRunsPerTree).
	MaxRunsPerTree int32
	// MaxResources is its quotas in resources, a JSON vector (a resource
	// it leaves out has none); nil: none (docs/resources.md).
	MaxResources []byte
}

// ResourceQuota is t.MaxResources read (the zero vector: none).
func (t Tenant) ResourceQuota() resources.Vector {
	var v resources.Vector
	_ = json.Unmarshal(t.MaxResources, &v) // written by SetQuota
	return v
}

// CreateTenant makes a tenant, audited in the new tenant's trail (action
// create_tenant). The caller's authority (system admin) is the API's to
// check. ErrExists when the name is taken.
func (k *Service) CreateTenant(ctx context.Context, by Principal, name string) (Tenant, error) {
	if err := dag.ValidateName(name); err != nil {
		return Tenant{}, &dag.FieldError{Field: "name", Message: err.Error()}
	}
	t := Tenant{ID: uuid.Must(uuid.NewV7()), Name: name, Weight: 1}
	err := store.InTx(ctx, k.pool, func(q *store.Queries) error {
		if _, err := q.TenantByName(ctx, name); err == nil {
			return fmt.Errorf("%w: tenant %q", ErrExists, name)
		} else if !store.IsNotFound(err) {
			return err
		}
		now, err := q.DatabaseNow(ctx)
		if err != nil {
			return err
		}
		t.CreatedAt = now
		if err := q.InsertTenant(ctx, newTenant(t.ID, name)); err != nil {
			return err
		}
		after := auditJSON(map[string]any{"name": name, "created_by_tenant": by.TenantName, "max_jobs": usage.Defaults.Jobs,
			"max_definition_bytes": usage.Defaults.DefinitionBytes, "max_runs": usage.Defaults.Runs, "max_tasks": usage.Defaults.Tasks,
			"max_history_bytes": usage.Defaults.HistoryBytes})
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: t.ID, Actor: by.Actor().Name,
			Action: "create_tenant", TargetKind: "tenant", TargetID: t.ID, TargetName: name, After: []byte(after)})
	})
	if err != nil {
		return Tenant{}, err
	}
	return t, nil
}

// newTenant is a new tenant's row: its storage quotas are usage.Defaults.
func newTenant(id uuid.UUID, name string) store.InsertTenantParams {
	d := usage.Defaults
	return store.InsertTenantParams{ID: id, Name: name, MaxJobs: d.Jobs, MaxDefinitionBytes: d.DefinitionBytes, MaxRuns: d.Runs, MaxTasks: d.Tasks,
		MaxHistoryBytes: d.HistoryBytes}
}

// ListTenants pages through every tenant by name.
func (k *Service) ListTenants(ctx context.Context, size int, token string) ([]Tenant, string, error) {
	size, err := pageSize(size)
	if err != nil {
		return nil, "", err
	}
	var after string
	if err := decodeToken(token, &after); err != nil {
		return nil, "", err
	}
	rows, err := store.New(k.pool).ListTenants(ctx, store.ListTenantsParams{After: after, PageSize: int32(size + 1)})
	if err != nil {
		return nil, "", err
	}
	rows, next := store.NextPage(rows, size, func(r store.ListTenantsRow) any { return r.Name })
	out := make([]Tenant, len(rows))
	for i, r := range rows {
		out[i] = Tenant{ID: r.ID, Name: r.Name, Weight: r.Weight, MaxConcurrency: r.MaxConcurrency, CreatedAt: r.CreatedAt}
	}
	return out, next, nil
}
