package access

import (
	"context"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/internal/store"
)

// The Locate methods name the job that an id in a request points at, in
// the caller's tenant, so that a grant on its namespace or on it can
// apply. ok is false when the id names nothing in the tenant (another
// tenant's included): the call then goes on and finds nothing either.

// LocateJob returns the job with this id.
func (k *Service) LocateJob(ctx context.Context, tenant, id uuid.UUID) (Resource, bool, error) {
	r, err := store.New(k.pool).LocateJob(ctx, store.LocateJobParams{TenantID: tenant, ID: id})
	return located(r.Namespace, r.Name, err)
}

// LocateRun returns the job of the run with this id.
func (k *Service) LocateRun(ctx context.Context, tenant, id uuid.UUID) (Resource, bool, error) {
	r, err := store.New(k.pool).LocateRun(ctx, store.LocateRunParams{TenantID: tenant, ID: id})
	return located(r.Namespace, r.Name, err)
}

// LocateTasks returns the jobs of the tasks with these ids (those that
// exist in the tenant).
func (k *Service) LocateTasks(ctx context.Context, tenant uuid.UUID, ids []uuid.UUID) ([]Resource, error) {
	rows, err := store.New(k.pool).LocateTasks(ctx, store.LocateTasksParams{TenantID: tenant, Ids: ids})
	if err != nil {
		return nil, err
	}
	out := make([]Resource, len(rows))
	for i, r := range rows {
		out[i] = Resource{Namespace: r.Namespace, Job: r.Name}
	}
	return out, nil
}

func located(namespace, name string, err error) (Resource, bool, error) {
	if store.IsNotFound(err) {
		return Resource{}, false, nil
	}
	if err != nil {
		return Resource{}, false, err
	}
	return Resource{Namespace: namespace, Job: name}, true, nil
}
