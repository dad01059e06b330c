// Package usage holds tenants to their storage quotas: how many live jobs
// a tenant may have, how many bytes their definitions may take and their
// history (the versions kept besides the live ones, the audit rows of
// their changes: an update keeps the definition before as a version and
// writes an audit row of both), and how many runs and tasks it may keep
// (until retention prunes them).
//
// # Counting
//
// What a tenant holds is counted in the transactions that write it: run
// creation (in the statement that inserts the runs) and retention keep
// tenant_run_usage; job creation through the API (in its statement), and
// apply, update and deletion (a Delta, written just before they commit)
// keep tenant_job_usage. Both have one row per (tenant, shard), so that
// the writers of one tenant in different shards (the shards' schedulers,
// API calls) never wait on one row, and every writer locks the rows it
// changes in key order; what a tenant holds is the sum of its rows. A
// definition's bytes are its spec as JSON text, as the database stores it;
// an audit row's, its before and after as JSON text (estimated from the
// compact JSON written: TextBytes). A pause, a resume or a deletion writes
// history that no quota refuses (Delta.AddExempt): a tenant at its quota
// can still stop and delete jobs. Recount counts everything again from the
// tables.
//
// # Checking
//
// A write that would take a tenant over one of its quotas is refused with
// an *ExceededError naming the quota (the API's ResourceExhausted), and
// nothing of it is written. What a tenant holds is read before the
// writing transaction, or beside it on a connection of its own (JobRooms,
// RunRooms): read in a serializable transaction that then writes one of
// the rows, the sum would conflict with every other writer of the tenant.
// So concurrent writers of one tenant may each take the same last room: a
// quota can be passed by what those writers add at once (a batch of
// creations, a firing batch per shard) and is then held from the next
// write on.
//
// Runs: a trigger over the quota is refused; an instant a schedule fires
// over it is written as a skipped run, without tasks, whose reason names
// the quota (a fired instant is never dropped silently), and counts as a
// run. Lowering a quota below what a tenant holds deletes nothing: its
// writes are refused until it is back under the quota.
package usage

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/store"
)

// Limits are a tenant's storage quotas; 0 is no quota.
type Limits struct {
	Jobs            int64
	DefinitionBytes int64
	Runs            int64
	Tasks           int64
	// HistoryBytes bounds the history of its definitions: the versions
	// kept besides the live ones, and the audit rows of its jobs' changes.
	HistoryBytes int64
}

// Usage is what a tenant holds.
type Usage struct {
	Jobs            int64
	DefinitionBytes int64
	Runs            int64
	Tasks           int64
	HistoryBytes    int64
}

// Defaults are the quotas of a tenant made by CreateTenant: room for a
// large team's jobs (at 256 MiB, about 10,000 definitions of 25 KB), for
// their history (1 GiB: each of those changed 13 times, a change keeping
// the version before and an audit row of both), and for a week of runs
// at one run of ten steps every second (6,000,000 tasks), with margin. A
// system admin changes them per tenant.
var Defaults = Limits{Jobs: 10_000, DefinitionBytes: 256 << 20, Runs: 1_000_000, Tasks: 10_000_000, HistoryBytes: 1 << 30}

// MaxLimit bounds each quota a system admin may set.
const MaxLimit = 1 << 50

// ExceededError is a write refused because it would take a tenant over a
// storage quota.
type ExceededError struct {
	Tenant string
	Quota  string // max_jobs, max_definition_bytes, max_runs, max_tasks or max_history_bytes
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
		{"max_history_bytes", r.Limits.HistoryBytes, r.Usage.HistoryBytes, add.HistoryBytes},
	} {
		if c.limit > 0 && c.add > 0 && c.used+c.add > c.limit {
			return &ExceededError{Tenant: r.Tenant, Quota: c.quota, Limit: c.limit, Used: c.used, Adding: c.add}
		}
	}
	r.Usage.Jobs += add.Jobs
	r.Usage.DefinitionBytes += add.DefinitionBytes
	r.Usage.Runs += add.Runs
	r.Usage.Tasks += add.Tasks
	r.Usage.HistoryBytes += add.HistoryBytes
	return nil
}

// Rooms are the rooms of tenants that have quotas; a tenant missing has
// none.
type Rooms map[uuid.UUID]*Room

// Clone copies rooms, so that a transaction tried again counts afresh.
func (rs Rooms) Clone() Rooms {
	out := make(Rooms, len(rs))
	for t, r := range rs {
		c := *r
		out[t] = &c
	}
	return out
}

// Add is Room.Add for a tenant; it always fits when the tenant has no
// quota.
func (rs Rooms) Add(tenant uuid.UUID, add Usage) error {
	if r, ok := rs[tenant]; ok {
		return r.Add(add)
	}
	return nil
}

// JobRooms reads the job quotas of the given tenants (repeats allowed)
// and what they hold. Read them outside the transaction that writes: it
// sums every shard's row of the tenant, which, in a serializable
// transaction that then writes one of them, conflicts with every other
// writer of the tenant.
func JobRooms(ctx context.Context, q *store.Queries, tenants []uuid.UUID) (Rooms, error) {
	if len(tenants) == 0 {
		return nil, nil
	}
	rows, err := q.JobRooms(ctx, tenants)
	if err != nil {
		return nil, err
	}
	out := make(Rooms, len(rows))
	for _, r := range rows {
		out[r.ID] = &Room{Tenant: r.Name, Limits: Limits{Jobs: r.MaxJobs, DefinitionBytes: r.MaxDefinitionBytes, HistoryBytes: r.MaxHistoryBytes},
			Usage: Usage{Jobs: r.Jobs, DefinitionBytes: r.DefinitionBytes, HistoryBytes: r.HistoryBytes}}
	}
	return out, nil
}

// RunRooms reads the run and task quotas of the given tenants (repeats
// allowed) and what they hold; as JobRooms, outside the writing
// transaction.
func RunRooms(ctx context.Context, q *store.Queries, tenants []uuid.UUID) (Rooms, error) {
	if len(tenants) == 0 {
		return nil, nil
	}
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

// Delta is what a transaction adds to (or takes from) what tenants hold
// of jobs and definition bytes, per (tenant, shard): counted as it writes,
// checked against the rooms read before it, and written once, just before
// it commits, in key order (Write), so that no transaction holds a usage
// row while it does anything else, and two lock the rows they share in
// one order.
type Delta map[Key]Usage

// Key is a tenant's shard; exempt keys hold what Check lets pass.
type Key struct {
	Tenant uuid.UUID
	Shard  int32
	exempt bool
}

// Add counts u for the tenant's shard.
func (d Delta) Add(tenant uuid.UUID, shard int32, u Usage) {
	d.add(Key{Tenant: tenant, Shard: shard}, u)
}

// AddExempt counts u for the tenant's shard without holding it to the
// quotas: what a pause, a resume or a deletion writes (its audit row), so
// that a tenant at its quota can still stop and delete jobs.
func (d Delta) AddExempt(tenant uuid.UUID, shard int32, u Usage) {
	d.add(Key{Tenant: tenant, Shard: shard, exempt: true}, u)
}

func (d Delta) add(k Key, u Usage) {
	c := d[k]
	c.Jobs += u.Jobs
	c.DefinitionBytes += u.DefinitionBytes
	c.Runs += u.Runs
	c.Tasks += u.Tasks
	c.HistoryBytes += u.HistoryBytes
	d[k] = c
}

// Check refuses what d adds to a tenant of rooms over one of its job
// quotas (what it takes away is always allowed).
func (d Delta) Check(rooms Rooms) error {
	sum := map[uuid.UUID]Usage{}
	for k, u := range d {
		if k.exempt {
			continue
		}
		c := sum[k.Tenant]
		c.Jobs += u.Jobs
		c.DefinitionBytes += u.DefinitionBytes
		c.HistoryBytes += u.HistoryBytes
		sum[k.Tenant] = c
	}
	for _, t := range slices.SortedFunc(maps.Keys(sum), compareUUID) {
		if r, ok := rooms[t]; ok {
			room := *r // rooms stay as read: a retried transaction checks again
			if err := room.Add(sum[t]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Write adds d to tenant_job_usage, in q's transaction.
func (d Delta) Write(ctx context.Context, q *store.Queries) error {
	merged := make(Delta, len(d))
	for k, u := range d {
		merged.Add(k.Tenant, k.Shard, u)
	}
	var p store.AddJobUsageParams
	for _, k := range slices.SortedFunc(maps.Keys(merged), compareKeys) {
		if u := merged[k]; u.Jobs != 0 || u.DefinitionBytes != 0 || u.HistoryBytes != 0 {
			p.TenantIds = append(p.TenantIds, k.Tenant)
			p.Shards = append(p.Shards, k.Shard)
			p.Jobs = append(p.Jobs, u.Jobs)
			p.DefinitionBytes = append(p.DefinitionBytes, u.DefinitionBytes)
			p.HistoryBytes = append(p.HistoryBytes, u.HistoryBytes)
		}
	}
	if len(p.TenantIds) == 0 {
		return nil
	}
	return q.AddJobUsage(ctx, p)
}

// WriteRuns writes what d adds of runs and tasks, in key order, in one
// statement (the jobs' part is Write's).
func (d Delta) WriteRuns(ctx context.Context, q *store.Queries) error {
	var p store.AddRunUsageParams
	for _, k := range slices.SortedFunc(maps.Keys(d), compareKeys) {
		if u := d[k]; u.Runs != 0 || u.Tasks != 0 {
			p.TenantIds = append(p.TenantIds, k.Tenant)
			p.Shards = append(p.Shards, k.Shard)
			p.Runs = append(p.Runs, u.Runs)
			p.Tasks = append(p.Tasks, u.Tasks)
		}
	}
	if len(p.TenantIds) == 0 {
		return nil
	}
	return q.AddRunUsage(ctx, p)
}

// compareKeys orders keys as the database orders (tenant_id, shard).
func compareKeys(a, b Key) int {
	if c := compareUUID(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	return cmp.Compare(a.Shard, b.Shard)
}

// compareUUID orders UUIDs as the database does (by their bytes).
func compareUUID(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }

// SortKeys orders keys as the database orders (tenant_id, shard).
func SortKeys(keys []Key) { slices.SortFunc(keys, compareKeys) }

// TextBytes estimates, from a definition as compact JSON (Go's
// encoding), its size as the database stores it and counts it (JSONB as
// text: a space after each ':' and ','). Go's escapes of '<', '>' and '&'
// make it over-estimate, never under.
func TextBytes(compact []byte) int64 {
	n, inString, escaped := int64(len(compact)), false, false
	for _, c := range compact {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ':' || c == ',':
			n++
		}
	}
	return n
}

// Recount counts again, from the tables, what every tenant holds, in one
// transaction: for counts written wrong, as by nodes older than the
// counts (a rolling upgrade across migration 00021), which later
// deletions and retention would take below the truth. Run it while no
// node writes: a tenant's first job or run in a shard written meanwhile
// may be counted twice or not at all.
func Recount(ctx context.Context, pool *pgxpool.Pool) error {
	return store.InTx(ctx, pool, func(q *store.Queries) error {
		for _, step := range []func(context.Context) error{q.ClearJobUsage, q.CountJobUsage, q.ClearRunUsage, q.CountRunUsage} {
			if err := step(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}

// Get reads a tenant's quotas and what it holds.
func Get(ctx context.Context, q *store.Queries, tenant uuid.UUID) (Limits, Usage, error) {
	r, err := q.TenantStorage(ctx, tenant)
	if err != nil {
		return Limits{}, Usage{}, err
	}
	return Limits{Jobs: r.MaxJobs, DefinitionBytes: r.MaxDefinitionBytes, Runs: r.MaxRuns, Tasks: r.MaxTasks, HistoryBytes: r.MaxHistoryBytes},
		Usage{Jobs: r.Jobs, DefinitionBytes: r.DefinitionBytes, Runs: r.Runs, Tasks: r.Tasks, HistoryBytes: r.HistoryBytes}, nil
}

// Set writes a tenant's quotas (each 0 to MaxLimit), in q's transaction.
func Set(ctx context.Context, q *store.Queries, tenant uuid.UUID, l Limits) error {
	return q.SetTenantStorageLimits(ctx, store.SetTenantStorageLimitsParams{ID: tenant, MaxJobs: l.Jobs,
		MaxDefinitionBytes: l.DefinitionBytes, MaxRuns: l.Runs, MaxTasks: l.Tasks, MaxHistoryBytes: l.HistoryBytes})
}
