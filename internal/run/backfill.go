package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

// A backfill fires a range of a job's instants (docs/schedules.md): the
// instants of its schedule (time zone, start and end, exclusions) in
// [from, to], each as a run with trigger backfill at its instant, at most
// MaxConcurrent unfinished at once, oldest or newest first. An instant
// that has a run already keeps it (invariant 2: one run per job and
// instant): the run is left alone (redo none); or, with redo failed, it
// is retried from where it failed when it ended failed, dead-lettered or
// cancelled; or, with redo all, it is run again from the start when it
// ended at all (succeeded too). Under redo failed and all, an instant
// whose run is a record (skipped, or cancelled before it started: no
// tasks) gets a run of the backfill in its place, the record deleted
// (audited, with its reason). A run that goes on is always left alone.
//
// Asking for one writes a row (backfills) and an audit row; the scheduler
// of the job's shard then moves it on (AdvanceBackfills), in its fenced
// transaction: the runs and the backfill's cursor commit together, so a
// crash at any point neither doubles nor loses an instant.

// Backfill bounds.
const (
	// MaxBackfillInstants is how many instants a range may hold unless the
	// request allows a large one (AllowLarge), MaxLargeBackfillInstants
	// then.
	MaxBackfillInstants      = 10_000
	MaxLargeBackfillInstants = 100_000
	DefaultBackfillParallel  = 10
	MaxBackfillParallel      = 1000
	// maxDryRunInstants bounds the instants a dry run lists.
	maxDryRunInstants = 1000
	// backfillChunk bounds the instants one step of one backfill looks at.
	backfillChunk = 500
)

// Redo values: which instants that have a run already a backfill fires
// again.
const (
	RedoNone   = "none"
	RedoFailed = "failed"
	RedoAll    = "all"
)

// BackfillOptions is what a backfill asks for.
type BackfillOptions struct {
	From, To      time.Time
	Redo          string // none (default), failed or all
	MaxConcurrent int    // default DefaultBackfillParallel
	NewestFirst   bool
	DryRun        bool
	AllowLarge    bool
}

// BackfillStatus is where a backfill is (the CHECK on backfills.status).
type BackfillStatus string

// Backfill statuses.
const (
	BackfillRunning   BackfillStatus = "running"   // it writes its runs, a batch at a time
	BackfillDone      BackfillStatus = "done"      // every instant of its window was written (or redone)
	BackfillCancelled BackfillStatus = "cancelled" // cancelled, or its job deleted
)

// Backfill is a backfill as the API shows it.
type Backfill struct {
	store.Backfill
	// A dry run's: the instants in the order they would fire (at most
	// maxDryRunInstants), and how many of the range's have a run already.
	Instants   []time.Time
	HaveRuns   int
	Namespace  string
	JobName    string
	DryRunOnly bool
}

func backfillError(field, format string, args ...any) error {
	return &dag.FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Backfill asks for a backfill of the job ref (or, with DryRun, says what
// it would do and writes nothing). Audited as action backfill on the job.
func (s *Service) Backfill(ctx context.Context, a job.Actor, ref job.Ref, o BackfillOptions) (*Backfill, error) {
	switch o.Redo {
	case "":
		o.Redo = RedoNone
	case RedoNone, RedoFailed, RedoAll:
	default:
		return nil, backfillError("redo", "%q is not one of none, failed, all", o.Redo)
	}
	switch {
	case o.MaxConcurrent == 0:
		o.MaxConcurrent = DefaultBackfillParallel
	case o.MaxConcurrent < 0 || o.MaxConcurrent > MaxBackfillParallel:
		return nil, backfillError("max_concurrent", "%d is outside 1..%d", o.MaxConcurrent, MaxBackfillParallel)
	}
	for field, t := range map[string]time.Time{"from": o.From, "to": o.To} {
		if err := schedule.CheckInstant(t); err != nil {
			return nil, backfillError(field, "%v", err)
		}
	}
	if !o.To.After(o.From) {
		return nil, backfillError("to", "%s is not after from %s", o.To.UTC().Format(time.RFC3339), o.From.UTC().Format(time.RFC3339))
	}
	// The instants are computed from the job as read, outside any lock (a
	// range of 100,000 instants past exclusions takes a while), and a dry
	// run takes no lock at all. The backfill is written with the job's
	// row locked: when its version moved on meanwhile, the instants are
	// computed again, from the locked row.
	j, err := s.jobs.Get(ctx, a, ref)
	if err != nil {
		return nil, err
	}
	if j.Status == job.StatusDeleted {
		return nil, fmt.Errorf("%w: %s", job.ErrDeleted, ref)
	}
	now, err := store.New(s.pool).DatabaseNow(ctx)
	if err != nil {
		return nil, err
	}
	if o.To.After(now) {
		return nil, backfillError("to", "%s is in the future (now %s): a backfill fires instants that have passed", o.To.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	all, err := backfillInstants(&j.Spec, j.Namespace+"/"+j.Name, o)
	if err != nil {
		return nil, err
	}
	b := &Backfill{Namespace: j.Namespace, JobName: j.Name, DryRunOnly: o.DryRun}
	b.Backfill = store.Backfill{TenantID: j.Tenant, JobID: j.ID, Shard: int32(j.Shard), FromAt: o.From, ToAt: o.To, Redo: o.Redo,
		MaxConcurrent: int32(o.MaxConcurrent), NewestFirst: o.NewestFirst, Total: int32(len(all)), Status: string(BackfillRunning), CreatedBy: a.Name}
	if o.DryRun {
		if o.NewestFirst {
			for i := len(all) - 1; i >= 0 && len(b.Instants) < maxDryRunInstants; i-- {
				b.Instants = append(b.Instants, all[i])
			}
		} else {
			b.Instants = all[:min(len(all), maxDryRunInstants)]
		}
		n, err := store.New(s.pool).CountRunsBetween(ctx, store.CountRunsBetweenParams{JobID: j.ID, FromAt: o.From, ToAt: o.To})
		b.HaveRuns = int(n)
		return b, err
	}
	var out *Backfill
	err = store.InRawTx(ctx, s.pool, func(tx pgx.Tx) error {
		out = nil
		q := store.New(tx)
		row, err := job.Lock(ctx, q, a, ref)
		if err != nil {
			return err
		}
		if row.Status == job.StatusDeleted {
			return fmt.Errorf("%w: %s", job.ErrDeleted, ref)
		}
		total := len(all)
		if row.ID != j.ID || row.Version != j.Version {
			var spec dag.JobSpec
			if err := json.Unmarshal(row.Spec, &spec); err != nil {
				return fmt.Errorf("job %s: spec: %w", row.ID, err)
			}
			again, err := backfillInstants(&spec, row.Namespace+"/"+row.Name, o)
			if err != nil {
				return err
			}
			total = len(again)
		}
		written, err := q.InsertBackfill(ctx, store.InsertBackfillParams{ID: uuid.Must(uuid.NewV7()), TenantID: row.TenantID, JobID: row.ID,
			Shard: row.Shard, FromAt: o.From, ToAt: o.To, Redo: o.Redo, MaxConcurrent: int32(o.MaxConcurrent), NewestFirst: o.NewestFirst,
			Total: int32(total), CreatedBy: a.Name, CreatedPrincipal: a.Principal})
		if err != nil {
			return err
		}
		if err := q.InsertRunAudit(ctx, store.InsertRunAuditParams{
			ID: uuid.Must(uuid.NewV7()), TenantID: row.TenantID, Actor: a.Name, Action: "backfill", TargetKind: "job",
			TargetID: row.ID, TargetName: row.Namespace + "/" + row.Name, After: mustMarshal(written),
		}); err != nil {
			return err
		}
		out = &Backfill{Backfill: written, Namespace: row.Namespace, JobName: row.Name}
		return nil
	})
	return out, err
}

// backfillInstants is the instants of spec's schedule in o's range, or
// the error that refuses the range: an @every schedule, no instant, or
// more than the bound (o.AllowLarge: the larger one).
func backfillInstants(spec *dag.JobSpec, name string, o BackfillOptions) ([]time.Time, error) {
	sched, err := schedule.Parse(spec.Schedule)
	if err != nil {
		return nil, fmt.Errorf("job %s: schedule: %w", name, err)
	}
	if !sched.Anchored() {
		return nil, backfillError("job", "%s fires @every an interval from when it last fired: its instants in a past range are not fixed", name)
	}
	limit := MaxBackfillInstants
	if o.AllowLarge {
		limit = MaxLargeBackfillInstants
	}
	all, more := sched.Between(o.From, o.To, limit)
	switch {
	case more && o.AllowLarge:
		return nil, backfillError("from", "the range holds more than %d instants: split it", limit)
	case more:
		return nil, backfillError("from", "the range holds more than %d instants: give allow_large (the CLI's --allow-large) for up to %d", limit, MaxLargeBackfillInstants)
	case len(all) == 0:
		return nil, backfillError("from", "no instant of %s's schedule is in the range", name)
	}
	return all, nil
}

// ErrBackfillNotRunning: no running backfill of the job with that id.
var ErrBackfillNotRunning = errors.New("backfill not running")

// CancelBackfill ends a running backfill of the job ref: it fires no more
// instants; the runs it wrote go on. Audited as cancel_backfill.
func (s *Service) CancelBackfill(ctx context.Context, a job.Actor, ref job.Ref, id uuid.UUID) (*Backfill, error) {
	var out *Backfill
	err := store.InRawTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := store.New(tx)
		row, err := job.Lock(ctx, q, a, ref)
		if err != nil {
			return err
		}
		b, err := q.CancelBackfill(ctx, store.CancelBackfillParams{TenantID: row.TenantID, JobID: row.ID, ID: id, Reason: "cancelled by " + a.Name})
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: %s of %s/%s", ErrBackfillNotRunning, id, row.Namespace, row.Name)
		}
		if err != nil {
			return err
		}
		out = &Backfill{Backfill: b, Namespace: row.Namespace, JobName: row.Name}
		return q.InsertRunAudit(ctx, store.InsertRunAuditParams{
			ID: uuid.Must(uuid.NewV7()), TenantID: row.TenantID, Actor: a.Name, Action: "cancel_backfill", TargetKind: "job",
			TargetID: row.ID, TargetName: row.Namespace + "/" + row.Name, After: mustMarshal(b),
		})
	})
	return out, err
}

// ListBackfills returns a job's backfills, newest first (at most 100).
func (s *Service) ListBackfills(ctx context.Context, a job.Actor, ref job.Ref) ([]Backfill, error) {
	j, err := s.jobs.Get(ctx, a, ref)
	if err != nil {
		return nil, err
	}
	rows, err := store.New(s.pool).ListBackfills(ctx, store.ListBackfillsParams{TenantID: a.Tenant, JobID: j.ID,
		BeforeAt: schedule.Latest, BeforeID: uuid.Max, PageSize: 100})
	out := make([]Backfill, len(rows))
	for i, r := range rows {
		out[i] = Backfill{Backfill: r, Namespace: j.Namespace, JobName: j.Name}
	}
	return out, err
}

// BackfillActor is the actor of the audit rows of the retries a backfill
// with redo failed makes.
const BackfillActor = "system (backfill)"

// AdvanceBackfills moves the running backfills of the shards on, in tx
// (the scheduler's, whose fence holds the shards: epochs by shard): for
// each, the next instants of its range up to its free concurrency, as new
// runs (or, with redo failed, retries of their failed runs), and its
// cursor and counts after them; a backfill whose range is done ends done,
// one whose job was deleted cancelled. A paused job's backfills wait. It
// returns how many backfills it looked at.
func (a *Applier) AdvanceBackfills(ctx context.Context, tx pgx.Tx, shards []int32, epochs map[int]int64, by *Firer, rooms usage.Rooms) (int, error) {
	q := store.New(tx)
	rows, err := q.RunningBackfills(ctx, store.RunningBackfillsParams{Shards: shards, Batch: 20})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	rooms = rooms.Clone() // counted by every Insert of this step, afresh if tx is tried again
	// What this step started, by job: two backfills of one job share its
	// runs' count.
	started := map[uuid.UUID]int{}
	for _, r := range rows {
		adv := store.AdvanceBackfillParams{ID: r.ID, CursorAt: r.CursorAt, Status: string(BackfillRunning)}
		switch r.JobStatus {
		case job.StatusDeleted:
			adv.Status, adv.Reason = string(BackfillCancelled), "the job was deleted"
			if err := q.AdvanceBackfill(ctx, adv); err != nil {
				return 0, err
			}
			continue
		}
		room := int(r.MaxConcurrent) - int(r.Active) - started[r.JobID]
		if room <= 0 {
			continue
		}
		var spec dag.JobSpec
		if err := json.Unmarshal(r.Spec, &spec); err != nil {
			return 0, fmt.Errorf("backfill %s: job spec: %w", r.ID, err)
		}
		sched, err := schedule.Parse(spec.Schedule)
		if err != nil {
			return 0, fmt.Errorf("backfill %s: job schedule: %w", r.ID, err)
		}
		next := nextBackfillInstants(sched, r)
		if len(next) == 0 {
			adv.Status = string(BackfillDone)
			if err := q.AdvanceBackfill(ctx, adv); err != nil {
				return 0, err
			}
			continue
		}
		have, err := q.RunsAt(ctx, store.RunsAtParams{JobID: r.JobID, Ats: next})
		if err != nil {
			return 0, err
		}
		existing := make(map[int64]store.RunsAtRow, len(have))
		for _, h := range have {
			existing[h.ScheduledFor.UnixNano()] = h
		}
		ref := JobRef{ID: r.JobID, Tenant: r.TenantID, Version: r.JobVersion, Shard: int(r.Shard), Spec: &spec}
		var news []New
		var retry, records []uuid.UUID
		probe := rooms.Clone() // what Insert will count: a run past the tenant's quota waits, unwritten
		for _, at := range next {
			if room == 0 {
				break
			}
			h, ran := existing[at.UnixNano()]
			// A record (an instant skipped or cancelled without running) is
			// run under redo failed or all: deleted, and written again as
			// a run of the backfill.
			record := ran && !h.HasTasks && r.Redo != RedoNone
			if !ran || record {
				if err := probe.Add(r.TenantID, usage.Usage{Runs: 1, Tasks: int64(len(spec.Steps))}); err != nil {
					adv.Reason = "waiting for storage room: " + err.Error()
					break
				}
			}
			adv.CursorAt = &at
			switch {
			case !ran || record:
				if record {
					records = append(records, h.ID)
				}
				news = append(news, New{Job: ref, At: at, Trigger: lifecycle.TriggerBackfill, Status: lifecycle.RunPending, Epoch: epochs[int(r.Shard)], Backfill: r.ID})
				room--
			case r.Redo == RedoFailed && h.Status.AcceptsRetry(), r.Redo == RedoAll && h.Status.AcceptsRerun():
				retry = append(retry, h.ID)
				room--
			default:
				adv.Existing++
			}
		}
		if err := deleteRecords(ctx, q, records, job.Actor{Tenant: r.TenantID, Name: BackfillActor}, r.Namespace+"/"+r.Name); err != nil {
			return 0, err
		}
		ids, err := a.Insert(ctx, tx, news, by, rooms)
		if err != nil {
			return 0, err
		}
		for _, id := range ids {
			if id != uuid.Nil {
				adv.Created++
			}
		}
		for _, id := range retry {
			ok, err := a.retryFinished(ctx, tx, job.Actor{Tenant: r.TenantID, Name: BackfillActor}, id, r.Namespace+"/"+r.Name, r.Redo == RedoAll)
			if err != nil {
				return 0, err
			}
			if ok {
				adv.Retried++
			} else {
				adv.Existing++
			}
		}
		started[r.JobID] += int(adv.Created + adv.Retried)
		if err := q.AdvanceBackfill(ctx, adv); err != nil {
			return 0, err
		}
	}
	return len(rows), nil
}

// deleteRecords deletes runs that are records (skipped or cancelled
// without tasks) whose instants a backfill runs, in tx: taken from their
// tenants' usage, each audited (action rerun, by actor, the record as it
// was) since its reason goes with it.
func deleteRecords(ctx context.Context, q *store.Queries, ids []uuid.UUID, actor job.Actor, jobName string) error {
	if len(ids) == 0 {
		return nil
	}
	gone, err := q.DeleteRecords(ctx, ids)
	if err != nil || len(gone) == 0 {
		return err
	}
	taken := usage.Delta{}
	for _, g := range gone {
		taken.Add(g.TenantID, g.Shard, usage.Usage{Runs: -1})
		before, _ := json.Marshal(map[string]any{"id": g.ID, "scheduled_for": g.ScheduledFor, "status": g.Status, "reason": g.Reason})
		after, _ := json.Marshal(map[string]any{"deleted": true, "replaced_by": "a run of the backfill at the same instant"})
		if err := q.InsertRunAudit(ctx, store.InsertRunAuditParams{
			ID: uuid.Must(uuid.NewV7()), TenantID: g.TenantID, Actor: actor.Name, Action: "rerun", TargetKind: "run",
			TargetID: g.ID, TargetName: jobName, Before: before, After: after,
		}); err != nil {
			return err
		}
	}
	return taken.WriteRuns(ctx, q)
}

// nextBackfillInstants is the next chunk of a backfill's instants after
// its cursor, in the order it fires them.
func nextBackfillInstants(s *schedule.Schedule, b store.RunningBackfillsRow) []time.Time {
	if b.NewestFirst {
		until := b.ToAt
		if b.CursorAt != nil {
			until = b.CursorAt.Add(-time.Nanosecond)
		}
		return s.Latest(b.FromAt, until, backfillChunk)
	}
	from := b.FromAt
	if b.CursorAt != nil {
		from = b.CursorAt.Add(time.Nanosecond)
	}
	next, _ := s.Between(from, b.ToAt, backfillChunk)
	return next
}

// retryFinished retries run id in tx (RetryRun's graph step, without the
// overlap policy: a backfill's concurrency bounds it) when it ended
// failed, dead-lettered or cancelled, and reports whether it did; with
// all, it runs it again from the start when it ended at all.
func (a *Applier) retryFinished(ctx context.Context, tx pgx.Tx, actor job.Actor, id uuid.UUID, jobName string, all bool) (bool, error) {
	q := store.New(tx)
	if _, err := q.LockRun(ctx, id); err != nil {
		if store.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	r, err := q.GetRun(ctx, store.GetRunParams{TenantID: actor.Tenant, ID: id})
	if err != nil {
		return false, err
	}
	before := fromGetRow(r)
	if !before.Status.AcceptsRetry() && !(all && before.Status.AcceptsRerun()) {
		return false, nil
	}
	return true, retryGraph(ctx, tx, a, actor, before, jobName, all)
}
