// Package usage holds tenants to their storage quotas: how many live jobs
// a tenant may have and how many bytes their definitions may take, and how
// many runs and tasks it may keep (until retention prunes them).
//
// # Counting
//
// What a tenant holds is counted as it is written, in the statements that
// write it: job creation, update and deletion keep tenant_job_usage; run
// creation and retention keep tenant_run_usage. Both have one row per
// (tenant, shard), so that the writers of one tenant in different shards
// (the shards' schedulers, API calls) never wait on one row; what a tenant
// holds is the sum of its rows. A definition's bytes are its spec as JSON
// text, as the database stores it.
//
// # Checking
//
// A write that would take a tenant over one of its quotas is refused with
// an *ExceededError naming the quota (the API's ResourceExhausted), and
// nothing of it is written. A check reads the sums and the write adds to
// them later in its transaction, so concurrent writers of one tenant may
// each pass the same last room: a quota can be passed by what those
// writers add at once (one batch of creations, one firing batch per shard)
// and is then held from the next write on.
//
// Runs: a trigger over the quota is refused; an instant a schedule fires
// over it is written as a skipped run, without tasks, whose reason names
// the quota (a fired instant is never dropped silently), and counts as a
// run. Lowering a quota below what a tenant holds deletes nothing: its
// writes are refused until it is back under the quota.
package usage

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/engine/store"
)

// Limits are a tenant's storage quotas; 0 is no quota.
type Limits struct {
	Jobs            int64
	DefinitionBytes int64
	Runs            int64
	Tasks           int64
}

// Usage is what a tenant holds.
type Usage struct {
	Jobs            int64
	DefinitionBytes int64
	Runs            int64
	Tasks           int64
}

// Defaults are the quotas of a tenant made by CreateTenant: room for a
// large team's jobs (at 256 MiB, about 10,000 definitions of 25 KB) and
// for a week of runs at one run of ten steps every second (6,000,000
// tasks), with margin. A system admin changes them per tenant.
var Defaults = Limits{Jobs: 10_000, DefinitionBytes: 256 << 20, Runs: 1_000_000, Tasks: 10_000_000}

// MaxLimit bounds each quota a system admin may set.
const MaxLimit = 1 << 50

// ExceededError is a write refused because it would take a tenant over a
// storage quota.
type ExceededError struct {
	Tenant string
	Quota  string // max_jobs, max_definition_bytes, max_runs or max_tasks
	Limit  int64
	Used   int64 // what the tenant holds
	Adding int64 // what the write would add
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("tenant %s: storage quota %s is %d, it holds %d and this would add %d: delete or let retention prune some, or ask a system admin to raise it",
		e.Tenant, e.Quota, e.Limit, e.Used, e.Adding)
}

// Room is what a tenant may still add under its quotas: Add checks an
// addition and counts it.
type Room struct {
	Tenant string
	Limits Limits
	Usage  Usage
}

// Add counts an addition of jobs, definition bytes, runs and tasks if it
// fits every quota; else it counts nothing and says which quota it
// passes.
func (r *Room) Add(add Usage) error {
	for _, c := range []struct {
		quota       string
		limit, used int64
		add         int64
	}{
		{"max_jobs", r.Limits.Jobs, r.Usage.Jobs, add.Jobs},
		{"max_definition_bytes", r.Limits.DefinitionBytes, r.Usage.DefinitionBytes, add.DefinitionBytes},
		{"max_runs", r.Limits.Runs, r.Usage.Runs, add.Runs},
		{"max_tasks", r.Limits.Tasks, r.Usage.Tasks, add.Tasks},
	} {
		if c.limit > 0 && c.add > 0 && c.used+c.add > c.limit {
			return &ExceededError{Tenant: r.Tenant, Quota: c.quota, Limit: c.limit, Used: c.used, Adding: c.add}
		}
	}
	r.Usage.Jobs += add.Jobs
	r.Usage.DefinitionBytes += add.DefinitionBytes
	r.Usage.Runs += add.Runs
	r.Usage.Tasks += add.Tasks
	return nil
}

// Rooms are the rooms of tenants that have quotas; a tenant missing has
// none.
type Rooms map[uuid.UUID]*Room

// Add is Room.Add for a tenant; it always fits when the tenant has no
// quota.
func (rs Rooms) Add(tenant uuid.UUID, add Usage) error {
	if r, ok := rs[tenant]; ok {
		return r.Add(add)
	}
	return nil
}

// JobRooms reads the job quotas of the given tenants (repeats allowed)
// and what they hold, in q's transaction.
func JobRooms(ctx context.Context, q *store.Queries, tenants []uuid.UUID) (Rooms, error) {
	rows, err := q.JobRooms(ctx, tenants)
	if err != nil {
		return nil, err
	}
	out := make(Rooms, len(rows))
	for _, r := range rows {
		out[r.ID] = &Room{Tenant: r.Name, Limits: Limits{Jobs: r.MaxJobs, DefinitionBytes: r.MaxDefinitionBytes},
			Usage: Usage{Jobs: r.Jobs, DefinitionBytes: r.DefinitionBytes}}
	}
	return out, nil
}

// RunRooms reads the run and task quotas of the given tenants (repeats
// allowed) and what they hold, in q's transaction.
func RunRooms(ctx context.Context, q *store.Queries, tenants []uuid.UUID) (Rooms, error) {
	rows, err := q.RunRooms(ctx, tenants)
	if err != nil {
		return nil, err
	}
	out := make(Rooms, len(rows))
	for _, r := range rows {
		out[r.ID] = &Room{Tenant: r.Name, Limits: Limits{Runs: r.MaxRuns, Tasks: r.MaxTasks}, Usage: Usage{Runs: r.Runs, Tasks: r.Tasks}}
	}
	return out, nil
}

// Before is what a tenant with a job quota held before a transaction's
// writes (nil: it has no such quota).
type Before struct {
	tenant uuid.UUID
	room   Room
}

// JobsBefore reads, in q's transaction and before its writes, what the
// tenant holds of jobs and definition bytes, for Check after them.
func JobsBefore(ctx context.Context, q *store.Queries, tenant uuid.UUID) (*Before, error) {
	rooms, err := JobRooms(ctx, q, []uuid.UUID{tenant})
	if err != nil {
		return nil, err
	}
	if r, ok := rooms[tenant]; ok {
		return &Before{tenant: tenant, room: *r}, nil
	}
	return nil, nil
}

// Check refuses, after the transaction's writes, what they added over a
// quota (the caller's transaction then rolls them back); what they took
// away is always allowed.
func (b *Before) Check(ctx context.Context, q *store.Queries) error {
	if b == nil {
		return nil
	}
	rooms, err := JobRooms(ctx, q, []uuid.UUID{b.tenant})
	if err != nil {
		return err
	}
	after, ok := rooms[b.tenant]
	if !ok { // its quota was lifted meanwhile
		return nil
	}
	r := b.room
	r.Limits = after.Limits
	return r.Add(Usage{Jobs: after.Usage.Jobs - r.Usage.Jobs, DefinitionBytes: after.Usage.DefinitionBytes - r.Usage.DefinitionBytes})
}

// Get reads a tenant's quotas and what it holds.
func Get(ctx context.Context, q *store.Queries, tenant uuid.UUID) (Limits, Usage, error) {
	r, err := q.TenantStorage(ctx, tenant)
	if err != nil {
		return Limits{}, Usage{}, err
	}
	return Limits{Jobs: r.MaxJobs, DefinitionBytes: r.MaxDefinitionBytes, Runs: r.MaxRuns, Tasks: r.MaxTasks},
		Usage{Jobs: r.Jobs, DefinitionBytes: r.DefinitionBytes, Runs: r.Runs, Tasks: r.Tasks}, nil
}

// Set writes a tenant's quotas (each 0 to MaxLimit), in q's transaction.
func Set(ctx context.Context, q *store.Queries, tenant uuid.UUID, l Limits) error {
	return q.SetTenantStorageLimits(ctx, store.SetTenantStorageLimitsParams{ID: tenant, MaxJobs: l.Jobs,
		MaxDefinitionBytes: l.DefinitionBytes, MaxRuns: l.Runs, MaxTasks: l.Tasks})
}
