package job

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// Reading jobs: one (Get, or Lock for a change), a page of them, their
// last runs and their history.

// Get returns one job of the actor's tenant (deleted ones too, by ID).
func (s *Service) Get(ctx context.Context, a Actor, ref Ref) (*Job, error) {
	q := store.New(s.pool)
	row, err := lookup(ctx, q, a, ref, false)
	if err != nil {
		return nil, err
	}
	rows := []store.Job{row}
	if err := withSchedules(ctx, q, rows); err != nil {
		return nil, err
	}
	j, err := fromRow(rows[0])
	if err != nil {
		return nil, err
	}
	return j, s.fillLastRuns(ctx, a, []*Job{j})
}

// Link is a job one starts after (upstream: schedule.after) or one that
// starts after it (downstream).
type Link struct {
	Namespace, Name string
	On              []string // the outcomes that start the downstream job
	Status          string   // active, paused; missing for an upstream no live job has the name of
}

// Links lists j's upstream job and its downstream jobs, those a's scope
// shows.
func (s *Service) Links(ctx context.Context, a Actor, j *Job) (up, down []Link, err error) {
	q := store.New(s.pool)
	if after := j.Spec.Schedule.After; after != nil && a.Scope.Sees(after.Namespace, after.Job) {
		status, err := liveStatus(ctx, q, a.Tenant, after.Namespace, after.Job)
		if err != nil {
			return nil, nil, err
		}
		up = append(up, Link{Namespace: after.Namespace, Name: after.Job, On: after.Outcomes(), Status: status})
	}
	rows, err := q.Downstreams(ctx, store.DownstreamsParams{TenantID: a.Tenant, Namespace: j.Namespace, Name: j.Name})
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rows {
		if a.Scope.Sees(r.Namespace, r.Name) {
			down = append(down, Link{Namespace: r.Namespace, Name: r.Name, On: r.Outcomes, Status: r.Status})
		}
	}
	return up, down, nil
}

// liveStatus is the status of the tenant's live job namespace/name, or
// "missing" when no live job has the name.
func liveStatus(ctx context.Context, q *store.Queries, tenant uuid.UUID, namespace, name string) (string, error) {
	row, err := q.GetLiveJobByName(ctx, store.GetLiveJobByNameParams{TenantID: tenant, Namespace: namespace, Name: name})
	switch {
	case err == nil:
		return row.Status, nil
	case store.IsNotFound(err):
		return "missing", nil
	}
	return "", err
}

// Calls lists the jobs j's steps run (run.job; status missing for one no
// live job has the name of) and the live jobs whose steps run j, those
// a's scope shows.
func (s *Service) Calls(ctx context.Context, a Actor, j *Job) (calls, callers []Link, err error) {
	q := store.New(s.pool)
	for _, c := range callees(j.Spec) {
		ns, name, _ := strings.Cut(c, "/")
		if !a.Scope.Sees(ns, name) {
			continue
		}
		status, err := liveStatus(ctx, q, a.Tenant, ns, name)
		if err != nil {
			return nil, nil, err
		}
		calls = append(calls, Link{Namespace: ns, Name: name, Status: status})
	}
	rows, err := q.Callers(ctx, store.CallersParams{TenantID: a.Tenant, Namespace: j.Namespace, Name: j.Name})
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rows {
		if a.Scope.Sees(r.Namespace, r.Name) {
			callers = append(callers, Link{Namespace: r.Namespace, Name: r.Name})
		}
	}
	return calls, callers, nil
}

// Lock reads one job of the actor's tenant (deleted ones too, by ID) in
// q's transaction and locks its row, then its schedule row, until the
// transaction ends: a firing of the job commits before, or waits. For one
// job that order cannot deadlock with a firing (see GetJobForUpdate). A
// transaction that locks several jobs one after another (apply) can: a
// firing locks due schedule rows in fire-time order, so it may hold a
// later job's row while waiting for an earlier one's. The database
// detects that (deadlock_timeout, 1 s by default) and fails one of the
// two, which is retried; no lock outlives it.
//
// A job without a schedule row (one written by a node older than the
// table, which the upgrade rules out) reads as its jobs row says, and the
// change that follows writes the row.
func Lock(ctx context.Context, q *store.Queries, a Actor, ref Ref) (store.Job, error) {
	row, err := lookup(ctx, q, a, ref, true)
	if err != nil {
		return row, err
	}
	next, err := q.JobScheduleForUpdate(ctx, row.ID)
	switch {
	case store.IsNotFound(err):
		return row, nil
	case err != nil:
		return row, fmt.Errorf("job %s: schedule: %w", row.ID, err)
	}
	if row.Status == StatusActive {
		row.NextFireAt = next
	}
	return row, nil
}

// withSchedules sets the next fire time of each active job of rows to its
// schedule's, the live one (firing advances job_schedules only; a jobs
// row holds the time its last definition change set, which a paused job
// resumes from).
func withSchedules(ctx context.Context, q *store.Queries, rows []store.Job) error {
	var ids []uuid.UUID
	for _, r := range rows {
		if r.Status == StatusActive {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	live, err := q.JobSchedules(ctx, ids)
	if err != nil {
		return err
	}
	next := make(map[uuid.UUID]*time.Time, len(live))
	for _, l := range live {
		next[l.JobID] = l.NextFireAt
	}
	for i := range rows {
		if rows[i].Status == StatusActive {
			rows[i].NextFireAt = next[rows[i].ID]
		}
	}
	return nil
}

func lookup(ctx context.Context, q *store.Queries, a Actor, ref Ref, forUpdate bool) (store.Job, error) {
	var row store.Job
	var err error
	switch {
	case ref.ID != uuid.Nil && forUpdate:
		row, err = q.GetJobForUpdate(ctx, store.GetJobForUpdateParams{TenantID: a.Tenant, ID: ref.ID})
	case ref.ID != uuid.Nil:
		row, err = q.GetJob(ctx, store.GetJobParams{TenantID: a.Tenant, ID: ref.ID})
	case ref.Name != "":
		ns := ref.Namespace
		if ns == "" {
			ns = dag.DefaultNamespace
		}
		// Locked, the job found by its name may turn out deleted (under
		// READ COMMITTED the lock reads the row as another transaction
		// committed it meanwhile, and that one may have given the name to
		// a new job): look the name up again.
		for range 3 {
			row, err = q.GetLiveJobByName(ctx, store.GetLiveJobByNameParams{TenantID: a.Tenant, Namespace: ns, Name: ref.Name})
			if err != nil || !forUpdate {
				break
			}
			if row, err = q.GetJobForUpdate(ctx, store.GetJobForUpdateParams{TenantID: a.Tenant, ID: row.ID}); err != nil || row.Status != StatusDeleted {
				break
			}
			err = pgx.ErrNoRows
		}
	default:
		return row, &dag.FieldError{Field: "id", Message: "give the job's id, or its namespace and name"}
	}
	if store.IsNotFound(err) {
		return row, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	return row, err
}

// ListFilter selects jobs. Empty fields do not filter; without Status,
// deleted jobs are left out.
type ListFilter struct {
	Namespace string
	// NameContains keeps jobs whose name contains it (at most 200 bytes).
	NameContains string
	Status       string
	Labels       map[string]string
	PageSize     int
	PageToken    string
	// WithSteps lists whole definitions; without it each job comes
	// without its steps (Spec.Steps and Spec.Run empty), the summary a
	// list shows.
	WithSteps bool
}

// Page sizes of every list call.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// ListBudgetBytes bounds the definitions one page of List carries (their
// specs as JSON): a page stops at the job that passes it (the first one
// whatever its size), and its page token says where the next begins. A
// definition is at most MaxDefinitionBytes.
const ListBudgetBytes = 4 << 20

// ListBudgetValues bounds the JSON values (dag.Payload.Values) of the
// definitions one page carries as it answers them (the view's part of
// each spec: params, schedule and alerts in the basic view, everything in
// the full one), in the same way: an API answer turns each into an
// object of its own (a protobuf Value, about 80 times the value's bytes
// for [[],[],...]), which the byte budget alone would not see. The audit
// list counts its entries' before and after alike.
const ListBudgetValues = 100_000

// PageSize checks a requested page size: 0 means the default.
func PageSize(n int) (int, error) {
	switch {
	case n < 0 || n > MaxPageSize:
		return 0, &dag.FieldError{Field: "page_size", Message: fmt.Sprintf("%d is outside 0..%d", n, MaxPageSize)}
	case n == 0:
		return DefaultPageSize, nil
	}
	return n, nil
}

type pageToken struct {
	Name string    `json:"n"`
	ID   uuid.UUID `json:"i"`
}

// List returns one page of jobs sorted by name, and the token of the next
// page ("" after the last).
func (s *Service) List(ctx context.Context, a Actor, f ListFilter) ([]*Job, string, error) {
	size, err := PageSize(f.PageSize)
	if err != nil {
		return nil, "", err
	}
	var after pageToken
	if f.PageToken != "" {
		if err := store.DecodePageToken(f.PageToken, &after); err != nil {
			return nil, "", &dag.FieldError{Field: "page_token", Message: "malformed; pass back the next_page_token of the previous page"}
		}
	}
	switch f.Status {
	case "", StatusActive, StatusPaused, StatusDeleted:
	default:
		return nil, "", &dag.FieldError{Field: "status", Message: fmt.Sprintf("%q is not one of active, paused, deleted", f.Status)}
	}
	p := store.ListJobsParams{
		TenantID: a.Tenant, Labels: labelsJSON(f.Labels), AfterName: after.Name, AfterID: after.ID,
		PageSize: int32(size + 1), WithSteps: f.WithSteps, Budget: ListBudgetBytes,
	}
	p.Scoped, p.ScopeNamespaces, p.ScopeJobs = a.Scope.Params()
	if f.Namespace != "" {
		p.Namespace = &f.Namespace
	}
	if f.Status != "" {
		p.Status = &f.Status
	}
	switch {
	case len(f.NameContains) > 200:
		return nil, "", &dag.FieldError{Field: "name_contains", Message: "at most 200 characters"}
	case strings.ContainsRune(f.NameContains, 0):
		return nil, "", &dag.FieldError{Field: "name_contains", Message: "contains a NUL character"}
	case f.NameContains != "":
		p.NameContains = &f.NameContains
	}
	q := store.New(s.pool)
	listed, err := q.ListJobs(ctx, p)
	if err != nil {
		return nil, "", err
	}
	rows := make([]store.Job, len(listed))
	for i, r := range listed {
		rows[i] = store.Job{ID: r.ID, TenantID: r.TenantID, Namespace: r.Namespace, Name: r.Name, Description: r.Description,
			Labels: r.Labels, Status: r.Status, Version: r.Version, Spec: r.Spec, Source: r.Source, Shard: r.Shard,
			NextFireAt: r.NextFireAt, CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy, UpdatedAt: r.UpdatedAt,
			UpdatedBy: r.UpdatedBy, DeletedAt: r.DeletedAt}
	}
	var pageRows int64
	if len(listed) > 0 {
		pageRows = listed[0].PageRows
	}
	token := func(r store.Job) any { return pageToken{Name: r.Name, ID: r.ID} }
	rows, next := store.NextBudgetedPage(rows, size, pageRows, token)
	if err := withSchedules(ctx, q, rows); err != nil {
		return nil, "", err
	}
	out := make([]*Job, 0, len(rows))
	values := 0
	for i, r := range rows {
		if values += dag.Payload(r.Spec).Values(); i > 0 && values > ListBudgetValues { // the page ends before this job
			next = store.EncodePageToken(token(rows[i-1]))
			break
		}
		j, err := fromRow(r)
		if err != nil {
			return nil, "", err
		}
		out = append(out, j)
	}
	if err := s.fillLastRuns(ctx, a, out); err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// fillLastRuns sets each job's LastRun, in one query.
func (s *Service) fillLastRuns(ctx context.Context, a Actor, jobs []*Job) error {
	if len(jobs) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(jobs))
	byID := make(map[uuid.UUID]*Job, len(jobs))
	for i, j := range jobs {
		ids[i], byID[j.ID] = j.ID, j
	}
	rows, err := store.New(s.pool).LastRuns(ctx, store.LastRunsParams{TenantID: a.Tenant, JobIds: ids})
	if err != nil {
		return err
	}
	for _, r := range rows {
		byID[r.JobID].LastRun = &LastRun{ID: r.ID, Status: lifecycle.RunStatus(r.Status).Ended(), ScheduledFor: r.ScheduledFor}
	}
	return nil
}

// MaxHistory bounds RecentHistory's rows; the budgets of a list's page
// bound what they hold.
const MaxHistory = 200

// RecentHistory returns the latest n audit rows of one job, newest first.
func (s *Service) RecentHistory(ctx context.Context, a Actor, id uuid.UUID, n int) ([]store.AuditLog, error) {
	if n < 0 || n > MaxHistory {
		return nil, &dag.FieldError{Field: "history", Message: fmt.Sprintf("%d is outside 0..%d", n, MaxHistory)}
	}
	if n == 0 {
		return nil, nil
	}
	rows, err := store.New(s.pool).JobHistory(ctx, store.JobHistoryParams{TenantID: a.Tenant, TargetID: id, MaxRows: int32(n)})
	if err != nil {
		return nil, err
	}
	// Each row may hold two definitions: the newest that fit the budgets
	// of a list's page (the first whatever its size), as ListAudit's.
	size, values := 0, 0
	for i, r := range rows {
		size += len(r.Before) + len(r.After)
		values += dag.Payload(r.Before).Values() + dag.Payload(r.After).Values()
		if i > 0 && (size > ListBudgetBytes || values > ListBudgetValues) {
			return rows[:i], nil
		}
	}
	return rows, nil
}

// History returns the audit rows of one job, oldest first.
func (s *Service) History(ctx context.Context, a Actor, id uuid.UUID) ([]store.AuditLog, error) {
	return store.New(s.pool).ListAuditForTarget(ctx, store.ListAuditForTargetParams{TenantID: a.Tenant, TargetID: id})
}
