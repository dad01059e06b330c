// Package watchdog raises and resolves the alerts a job's spec.alerts asks
// for, and turns run finishes into the job's callbacks. It measures only
// against the database clock.
//
// # What it raises
//
//   - missed: an expected instant has no started run start_within after
//     it. Two probes find it: the dead man's switch (an active job whose
//     next_fire_at is that late has not fired at all: its scheduler is
//     down, wedged or behind) and the open-run probe (a run was created for
//     the instant but has not started: queued behind overlap, stranded in a
//     queue with no worker). Both name the cause by the instant, so an
//     instant raises one alert, however many passes or nodes see it.
//   - stuck: a run not finished finish_within after its instant (cause:
//     the run), or an attempt running longer than its step's timeout plus
//     Config.StuckGrace (cause: the attempt): a worker whose handler ignores its
//     cancelled context, or a wedged worker whose heartbeats go on.
//   - failure: a run that finished failed or dead-lettered; dead_letter: a
//     run that finished dead-lettered (its tasks wait for a replay). Both
//     come from the finish events (run_finishes) that the transaction
//     finishing a watched run writes.
//   - paused: pause_after_failures paused the job (its latest N ended runs
//     since it was last resumed all failed); raised whatever alerts.on
//     says, resolved when the job is resumed. The pause is written in the
//     pass's transaction (the job's row, then its schedule row: the lock
//     order of every definition change).
//
// Alerts are rows (table alerts) unique per (job, cause): raising is an
// insert that does nothing while the cause's alert is open, and opens a
// resolved one again (its cause came back: a replayed dead letter that
// dead-lettered again), notifying again. Each pass also
// resolves, among the next window of open alerts (so that every open alert
// is looked at within a few passes, at a bounded cost each), those whose
// cause cleared (a later run started, the
// run finished, the attempt ended, a later run succeeded, the dead
// letters were replayed, the job was paused, deleted or its alerts
// removed). The job's alerts.notify webhooks are told of both, and its
// callbacks of every run finish they ask for, as notifications that the
// workers deliver (package notify).
//
// # Who watches what, and transaction boundaries
//
// Every scheduler node runs a Watchdog over the shards it holds, as the
// scheduler fires them (no other lease, no cluster-wide lock). One pass is
// one transaction:
//
//  1. shard.Fence: the node's shard leases, FOR KEY SHARE (the firing
//     transaction's fence): a node that lost a shard writes nothing for it,
//     and a node stopped in the middle of a pass (SIGSTOP) is cut off by
//     idle_in_transaction_session_timeout and its pass rolls back.
//  2. Reads: the database clock, overdue watched jobs (job_schedules_due
//     shifted back by MinStartWithin, one index range per shard), open watched runs
//     (runs_watched) and their running attempts, the job specs not cached.
//  3. TakeRunFinishes: a batch of finish events, FOR UPDATE SKIP LOCKED,
//     deleted in the same transaction (a crash before commit leaves them
//     for the next pass).
//  4. RaiseAlerts (insert, ON CONFLICT DO NOTHING), ResolveAlerts
//     (updates open alerts of the shards, a window of Batch of them a
//     pass: OpenAlertsWindow), InsertNotifications.
//
// Locks, in order: shard rows (key share), run_finishes rows, alerts rows,
// new notifications rows. Jobs, runs, tasks and attempts are only read, so
// the watchdog never waits on, or holds up, firing or reports. Counters
// are recorded after commit.
//
// A pass reads what is late, not every job: the dead man's switch reads
// the jobs due more than MinStartWithin ago (none in a healthy cluster),
// the open-run probe the unfinished runs of watched jobs, so its cost
// follows the work in flight, not the number of jobs.
package watchdog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/shard"
)

// DefaultStuckGrace is how long past its step's timeout a running attempt
// is stuck: the worker cancels it at the timeout (and kills a command),
// so an attempt still running this much later is not ending.
const DefaultStuckGrace = 30 * time.Second

// Config configures a Watchdog.
type Config struct {
	Pool   *pgxpool.Pool
	Shards *shard.Manager
	// Interval between passes; default 2 s.
	Interval time.Duration
	// Batch bounds the rows of one probe; default 1000.
	Batch int
	// StuckGrace: see DefaultStuckGrace.
	StuckGrace time.Duration
	Logger     *slog.Logger
	Metrics    *metrics.Metrics
}

// Watchdog watches the jobs of this node's shards.
type Watchdog struct {
	cfg   Config
	specs map[uuid.UUID]*jobInfo // by job id; replaced when its version changes
	// resolveAfter is where the next pass's look at the open alerts
	// starts (the last alert id the previous pass looked at; zero: from
	// the first). Passes do not overlap.
	resolveAfter uuid.UUID
}

// jobInfo is what a pass needs of a watched job.
type jobInfo struct {
	version   int64
	tenant    uuid.UUID
	namespace string
	name      string
	spec      dag.JobSpec
	sched     *schedule.Schedule       // spec.Schedule, For the job; nil if it no longer parses
	timeouts  map[string]time.Duration // by step
}

// maxCachedSpecs bounds the spec cache; it is emptied when full.
const maxCachedSpecs = 10_000

// New returns a Watchdog.
func New(cfg Config) (*Watchdog, error) {
	switch {
	case cfg.Pool == nil:
		return nil, errors.New("watchdog: Config.Pool is required")
	case cfg.Shards == nil:
		return nil, errors.New("watchdog: Config.Shards is required")
	case cfg.Interval < 0 || cfg.Batch < 0:
		return nil, errors.New("watchdog: Interval and Batch must not be negative")
	}
	if cfg.Interval == 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Batch == 0 {
		cfg.Batch = 1000
	}
	if cfg.StuckGrace <= 0 {
		cfg.StuckGrace = DefaultStuckGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Watchdog{cfg: cfg, specs: map[uuid.UUID]*jobInfo{}}, nil
}

// Run makes a pass every Interval until ctx ends.
func (w *Watchdog) Run(ctx context.Context) error {
	for {
		if res, err := w.Pass(ctx); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Error("watchdog pass failed", "err", err)
		} else if len(res.Raised) > 0 || len(res.Resolved) > 0 {
			w.cfg.Logger.Info("alerts", "raised", len(res.Raised), "resolved", len(res.Resolved))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.cfg.Interval):
		}
	}
}

// Result is what one pass did.
type Result struct {
	Raised, Resolved []store.Alert
	Notifications    int
	Finishes         int
	// Paused counts the jobs pause_after_failures paused.
	Paused int
}

// pass holds one pass's work.
type pass struct {
	q      *store.Queries
	now    time.Time
	paused int // jobs pause_after_failures paused
	alerts store.RaiseAlertsParams
	notes  store.InsertNotificationsParams
}

// Pass makes one pass over the node's shards, in one transaction.
func (w *Watchdog) Pass(ctx context.Context) (Result, error) {
	leases := w.cfg.Shards.Leases()
	if len(leases) == 0 {
		return Result{}, nil
	}
	var res Result
	next := w.resolveAfter
	err := store.InRawTx(ctx, w.cfg.Pool, func(tx pgx.Tx) error {
		res = Result{}
		p := &pass{q: store.New(tx)}
		fenced, err := w.cfg.Shards.Fence(ctx, tx, leases)
		if errors.Is(err, shard.ErrLost) {
			return nil // the node holds none of them any more
		}
		if err != nil {
			return err
		}
		held := shard.Shards(fenced)
		if p.now, err = p.q.DatabaseNow(ctx); err != nil {
			return err
		}
		if err := w.overdueJobs(ctx, p, held); err != nil {
			return err
		}
		if err := w.openRuns(ctx, p, held); err != nil {
			return err
		}
		res.Finishes, err = w.finishes(ctx, p, held)
		res.Paused = p.paused
		if err != nil {
			return err
		}
		if len(p.alerts.Ids) > 0 {
			if res.Raised, err = p.q.RaiseAlerts(ctx, p.alerts); err != nil {
				return err
			}
		}
		if res.Resolved, next, err = w.resolve(ctx, p, held); err != nil {
			return err
		}
		if err := w.alertNotifications(ctx, p, res.Raised, "alert.raised"); err != nil {
			return err
		}
		if err := w.alertNotifications(ctx, p, res.Resolved, "alert.resolved"); err != nil {
			return err
		}
		res.Notifications = len(p.notes.Ids)
		if len(p.notes.Ids) > 0 {
			return p.insertNotifications(ctx)
		}
		return nil
	})
	if err == nil {
		w.resolveAfter = next
		w.cfg.Metrics.AlertsRaised(kinds(res.Raised))
	}
	return res, err
}

// resolve closes the alerts whose cause cleared among the next window of
// up to Batch open alerts of the shards (after w.resolveAfter, wrapping
// to the first when fewer are left), and returns them with where the next
// pass's window starts.
func (w *Watchdog) resolve(ctx context.Context, p *pass, held []int32) ([]store.Alert, uuid.UUID, error) {
	win, err := p.q.OpenAlertsWindow(ctx, store.OpenAlertsWindowParams{Shards: held, After: w.resolveAfter, Batch: int32(w.cfg.Batch)})
	if err != nil {
		return nil, w.resolveAfter, err
	}
	next := win.Until
	if int(win.N) < w.cfg.Batch {
		next = uuid.Nil // the last window: the next pass starts from the first
	}
	if win.N == 0 {
		return nil, next, nil
	}
	resolved, err := p.q.ResolveAlerts(ctx, store.ResolveAlertsParams{Shards: held, After: w.resolveAfter, Until: win.Until})
	return resolved, next, err
}

func kinds(alerts []store.Alert) map[string]int {
	out := map[string]int{}
	for _, a := range alerts {
		out[a.Kind]++
	}
	return out
}

// overdueJobs is the dead man's switch: a watched job whose next instant
// is older than its start_within has not fired that instant at all.
func (w *Watchdog) overdueJobs(ctx context.Context, p *pass, held []int32) error {
	rows, err := p.q.OverdueWatchedJobs(ctx, store.OverdueWatchedJobsParams{Shards: held, MinSeconds: dag.MinStartWithin.Seconds(), Batch: int32(w.cfg.Batch)})
	if err != nil {
		return err
	}
	need := map[uuid.UUID]int64{}
	for _, r := range rows {
		need[r.ID] = r.Version
	}
	if err := w.load(ctx, p.q, need); err != nil {
		return err
	}
	for _, r := range rows {
		j := w.specs[r.ID]
		if j == nil {
			continue
		}
		within, ok := j.startWithin()
		if !ok || p.now.Sub(r.NextFireAt) < within {
			continue
		}
		instant := j.instantOf(r.NextFireAt)
		p.raise(store.Alert{TenantID: r.TenantID, JobID: r.ID, Shard: r.Shard, Kind: dag.AlertMissed, Cause: missedCause(instant),
			ScheduledFor: &instant,
			Message: fmt.Sprintf("no run started within %s of %s: the instant has not fired (is a scheduler holding shard %d?)",
				within, r.NextFireAt.UTC().Format(time.RFC3339), r.Shard)})
	}
	return nil
}

// openRuns checks the unfinished runs of watched jobs: not started in
// time (missed), not finished in time or with an attempt past its timeout
// (stuck).
func (w *Watchdog) openRuns(ctx context.Context, p *pass, held []int32) error {
	params := store.OpenWatchedRunsParams{Shards: held, MinSeconds: 1, AfterShard: -1, Batch: int32(w.cfg.Batch)}
	for {
		runs, err := p.q.OpenWatchedRuns(ctx, params)
		if err != nil {
			return err
		}
		if err := w.checkRuns(ctx, p, runs); err != nil {
			return err
		}
		if len(runs) < w.cfg.Batch {
			return nil
		}
		last := runs[len(runs)-1]
		params.AfterShard, params.AfterAt, params.AfterID = last.Shard, last.ScheduledFor, last.ID
	}
}

func (w *Watchdog) checkRuns(ctx context.Context, p *pass, runs []store.OpenWatchedRunsRow) error {
	need := map[uuid.UUID]int64{}
	var started []uuid.UUID
	for i, r := range runs {
		need[r.JobID] = r.JobVersion
		if r.StartedAt == nil { // not written before the run's end: its first task's start
			runs[i].StartedAt = r.FirstStart
		}
		if runs[i].StartedAt != nil {
			started = append(started, r.ID)
		}
	}
	if err := w.load(ctx, p.q, need); err != nil {
		return err
	}
	byRun := make(map[uuid.UUID]store.OpenWatchedRunsRow, len(runs))
	for _, r := range runs {
		byRun[r.ID] = r
		j := w.specs[r.JobID]
		if j == nil || j.spec.Alerts == nil {
			continue // callbacks only
		}
		a := j.spec.Alerts
		late := p.now.Sub(j.due(r))
		if within, ok := j.startWithin(); ok && r.StartedAt == nil && late >= within {
			p.raise(store.Alert{TenantID: r.TenantID, JobID: r.JobID, Shard: r.Shard, Kind: dag.AlertMissed, Cause: missedCause(r.ScheduledFor),
				RunID: &r.ID, ScheduledFor: &r.ScheduledFor,
				Message: fmt.Sprintf("no run started within %s of %s: run %s is waiting to start", within, r.ScheduledFor.UTC().Format(time.RFC3339), r.ID)})
		}
		if a.FinishWithin != nil && slices.Contains(a.On, dag.AlertStuck) && late >= a.FinishWithin.Duration {
			p.raise(store.Alert{TenantID: r.TenantID, JobID: r.JobID, Shard: r.Shard, Kind: dag.AlertStuck, Cause: "stuck:run:" + r.ID.String(),
				RunID: &r.ID, ScheduledFor: &r.ScheduledFor,
				Message: fmt.Sprintf("run %s for %s has not finished within %s", r.ID, r.ScheduledFor.UTC().Format(time.RFC3339), a.FinishWithin.Duration)})
		}
	}
	if len(started) == 0 {
		return nil
	}
	attempts, err := p.q.RunningAttemptsOfRuns(ctx, started)
	if err != nil {
		return err
	}
	for _, at := range attempts {
		r := byRun[at.RunID]
		j := w.specs[r.JobID]
		if j == nil || j.spec.Alerts == nil || !slices.Contains(j.spec.Alerts.On, dag.AlertStuck) {
			continue
		}
		step, _, _ := dag.StepOfItem(at.Step) // an item of a fan-out has its step's timeout
		timeout, ok := j.timeouts[step]
		if !ok || p.now.Sub(at.StartedAt) < timeout+w.cfg.StuckGrace {
			continue
		}
		p.raise(store.Alert{TenantID: r.TenantID, JobID: r.JobID, Shard: r.Shard, Kind: dag.AlertStuck, Cause: "stuck:attempt:" + at.AttemptID.String(),
			RunID: &r.ID, AttemptID: &at.AttemptID, ScheduledFor: &r.ScheduledFor,
			Message: fmt.Sprintf("step %s attempt %d has run %s, past its timeout of %s", at.Step, at.Number,
				p.now.Sub(at.StartedAt).Round(time.Second), timeout)})
	}
	return nil
}

// callbackEvent is the callback event (spec callbacks' on) of each run end.
var callbackEvent = map[lifecycle.RunStatus]string{
	lifecycle.RunSucceeded: dag.OnSucceeded, lifecycle.RunFailed: dag.OnFailed, lifecycle.RunCancelled: dag.OnCancelled,
}

// finishes turns a batch of run finish events into failure and
// dead_letter alerts and callbacks, and deletes them.
func (w *Watchdog) finishes(ctx context.Context, p *pass, held []int32) (int, error) {
	rows, err := p.q.TakeRunFinishes(ctx, store.TakeRunFinishesParams{Shards: held, Batch: int32(w.cfg.Batch)})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	for i := range rows { // an end written dead_lettered by a version before the status failed
		rows[i].Status = string(lifecycle.RunStatus(rows[i].Status).Ended())
	}
	need := map[uuid.UUID]int64{}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		need[r.JobID] = r.JobVersion
		ids[i] = r.RunID
	}
	if err := w.load(ctx, p.q, need); err != nil {
		return 0, err
	}
	for _, r := range rows {
		j := w.specs[r.JobID]
		if j == nil {
			continue
		}
		if a := j.spec.Alerts; a != nil {
			// A run with dead letters failed too: failure resolves when a
			// later run succeeds, dead_letter when its dead letters are
			// replayed.
			var raise []string
			if lifecycle.RunStatus(r.Status).Ended() == lifecycle.RunFailed {
				raise = []string{dag.AlertFailure}
				if r.DeadLetters {
					raise = append(raise, dag.AlertDeadLetter)
				}
			}
			for _, kind := range raise {
				if !slices.Contains(a.On, kind) {
					continue
				}
				msg := fmt.Sprintf("run %s for %s %s", r.RunID, r.ScheduledFor.UTC().Format(time.RFC3339), r.Status)
				if r.Reason != "" {
					msg += ": " + r.Reason
				}
				p.raise(store.Alert{TenantID: r.TenantID, JobID: r.JobID, Shard: r.Shard, Kind: kind, Cause: kind + ":run:" + r.RunID.String(),
					RunID: &r.RunID, ScheduledFor: &r.ScheduledFor, Message: msg})
			}
		}
		if err := w.pauseAfterFailures(ctx, p, j, r); err != nil {
			return 0, err
		}
		on := callbackEvent[lifecycle.RunStatus(r.Status).Ended()]
		for _, c := range j.spec.Callbacks {
			if !slices.Contains(c.On, on) {
				continue
			}
			body := map[string]any{"event": "run." + on, "run": map[string]any{
				"id": r.RunID, "job_id": r.JobID, "job": j.name, "namespace": j.namespace, "status": r.Status, "reason": r.Reason,
				"scheduled_for": r.ScheduledFor.UTC(), "trigger": r.Trigger, "started_at": r.StartedAt, "finished_at": r.FinishedAt.UTC(),
			}}
			if err := p.notify(j, r.JobID, "run."+on, r.RunID, uuid.Nil, c.Webhook, body, r.TraceParent); err != nil {
				return 0, err
			}
		}
	}
	return len(rows), p.q.DeleteRunFinishes(ctx, ids)
}

// pauseAfterFailures pauses the job of a failed run when its latest
// pause_after_failures ended runs (since it was last resumed) all failed,
// in the pass's transaction: the pause (audited with the system as its
// actor) and its alert of kind paused commit with the deletion of the
// finish event, or neither does. A finish seen again after a rollback
// reads the same runs; a job paused already is left as it is.
func (w *Watchdog) pauseAfterFailures(ctx context.Context, p *pass, j *jobInfo, r store.TakeRunFinishesRow) error {
	n := j.spec.PauseAfterFailures
	if n <= 0 || lifecycle.RunStatus(r.Status).Ended() != lifecycle.RunFailed {
		return nil
	}
	failing := func() (bool, error) {
		c, err := p.q.ConsecutiveFailures(ctx, store.ConsecutiveFailuresParams{JobID: r.JobID, TenantID: r.TenantID, N: int32(n)})
		return err == nil && int(c.Failed) >= n, err
	}
	if f, err := failing(); err != nil || !f { // most failures: no lock taken
		return err
	}
	paused, err := job.PauseForFailures(ctx, p.q, job.Actor{Tenant: r.TenantID, Name: PauseActor}, r.JobID, failing)
	if err != nil || !paused {
		return err
	}
	p.paused++
	p.raise(store.Alert{TenantID: r.TenantID, JobID: r.JobID, Shard: r.Shard, Kind: dag.AlertPaused, Cause: dag.AlertPaused + ":run:" + r.RunID.String(),
		RunID: &r.RunID, ScheduledFor: &r.ScheduledFor,
		Message: fmt.Sprintf("paused after %d failed runs in a row (pause_after_failures), the last run %s for %s", n, r.RunID, r.ScheduledFor.UTC().Format(time.RFC3339))})
	return nil
}

// PauseActor is the actor of the audit rows of pauses by
// pause_after_failures.
const PauseActor = "system (pause_after_failures)"

// alertNotifications tells a job's alerts.notify webhooks of alerts.
func (w *Watchdog) alertNotifications(ctx context.Context, p *pass, alerts []store.Alert, event string) error {
	need := map[uuid.UUID]int64{}
	for _, a := range alerts {
		if j := w.specs[a.JobID]; j == nil {
			need[a.JobID] = -1 // any version: resolved alerts may name a job not read this pass
		}
	}
	if err := w.load(ctx, p.q, need); err != nil {
		return err
	}
	for _, a := range alerts {
		j := w.specs[a.JobID]
		if j == nil || j.spec.Alerts == nil {
			continue // deleted job or alerts removed: nobody to tell
		}
		body := map[string]any{"event": event, "alert": map[string]any{
			"id": a.ID, "kind": a.Kind, "job_id": a.JobID, "job": j.name, "namespace": j.namespace, "message": a.Message,
			"run_id": a.RunID, "scheduled_for": a.ScheduledFor, "raised_at": a.RaisedAt.UTC(), "resolved_at": a.ResolvedAt,
			"resolution": a.Resolution,
		}}
		for _, n := range j.spec.Alerts.Notify {
			runID := uuid.Nil
			if a.RunID != nil {
				runID = *a.RunID
			}
			if err := p.notify(j, a.JobID, event, runID, a.ID, *n.Webhook, body, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *pass) raise(a store.Alert) {
	ap := &p.alerts
	ap.Ids = append(ap.Ids, uuid.Must(uuid.NewV7()))
	ap.TenantIds = append(ap.TenantIds, a.TenantID)
	ap.JobIds = append(ap.JobIds, a.JobID)
	ap.Shards = append(ap.Shards, a.Shard)
	ap.Kinds = append(ap.Kinds, a.Kind)
	ap.Causes = append(ap.Causes, a.Cause)
	ap.RunIds = append(ap.RunIds, deref(a.RunID))
	ap.AttemptIds = append(ap.AttemptIds, deref(a.AttemptID))
	at := time.Time{}
	if a.ScheduledFor != nil {
		at = *a.ScheduledFor
	}
	ap.ScheduledFors = append(ap.ScheduledFors, at)
	ap.Messages = append(ap.Messages, a.Message)
}

// insertNotifications writes the pass's notifications, each in its
// tenant's bound queue when the tenant bound the job's queue.
func (p *pass) insertNotifications(ctx context.Context) error {
	b, err := dispatch.LoadBindings(ctx, p.q, p.notes.TenantIds)
	if err != nil {
		return err
	}
	for i, queue := range p.notes.Queues {
		p.notes.Queues[i] = b.Queue(p.notes.TenantIds[i], queue)
	}
	return p.q.InsertNotifications(ctx, p.notes)
}

func (p *pass) notify(j *jobInfo, job uuid.UUID, event string, run, alert uuid.UUID, hook dag.Webhook, body map[string]any, traceParent string) error {
	id := uuid.Must(uuid.NewV7())
	body["id"] = id
	body["at"] = p.now.UTC()
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	headers, err := json.Marshal(hook.Headers)
	if err != nil {
		return err
	}
	if hook.Headers == nil {
		headers = []byte("{}")
	}
	n := &p.notes
	n.Ids = append(n.Ids, id)
	n.TenantIds = append(n.TenantIds, j.tenant)
	n.JobIds = append(n.JobIds, job)
	n.Namespaces = append(n.Namespaces, j.namespace)
	n.Queues = append(n.Queues, j.queue())
	n.Events = append(n.Events, event)
	n.RunIds = append(n.RunIds, run)
	n.AlertIds = append(n.AlertIds, alert)
	n.Urls = append(n.Urls, hook.URL)
	n.Headers = append(n.Headers, headers)
	n.Secrets = append(n.Secrets, hook.Secret)
	n.Bodies = append(n.Bodies, b)
	n.TraceParents = append(n.TraceParents, traceParent)
	return nil
}

func deref(id *uuid.UUID) uuid.UUID {
	if id == nil {
		return uuid.Nil
	}
	return *id
}

// due is when a run was due to start, from which missed and stuck are
// measured: its fire time (instant plus jitter) for a run the schedule
// fired; its creation for a run of a range backfill (its instant may be
// long past) or one started by hand; the end of its debounce for a
// debounced run.
func (j *jobInfo) due(r store.OpenWatchedRunsRow) time.Time {
	switch {
	case r.DebounceAt != nil: // a debounced run: when its triggers paused
		return *r.DebounceAt
	case r.Backfilled || !r.Trigger.Scheduled():
		return r.CreatedAt
	case j.sched != nil:
		return j.sched.Fire(r.ScheduledFor)
	}
	return r.ScheduledFor
}

// instantOf is the instant a job's fire time is for (the cause of a
// missed alert names instants, whether a run exists or not).
func (j *jobInfo) instantOf(fire time.Time) time.Time {
	if j.sched == nil {
		return fire
	}
	return j.sched.InstantOf(fire)
}

func missedCause(instant time.Time) string {
	return "missed:" + instant.UTC().Format(time.RFC3339Nano)
}

// startWithin is the job's start deadline if it raises missed.
func (j *jobInfo) startWithin() (time.Duration, bool) {
	a := j.spec.Alerts
	if a == nil || a.StartWithin == nil || !slices.Contains(a.On, dag.AlertMissed) {
		return 0, false
	}
	return a.StartWithin.Duration, true
}

// queue is the queue whose workers deliver the job's notifications: its
// first step's.
func (j *jobInfo) queue() string {
	if len(j.spec.Steps) == 0 {
		return dag.DefaultQueue
	}
	return j.spec.Effective(0).Queue
}

// load reads the specs of the jobs whose cached version differs from the
// one given (-1: any cached version will do).
func (w *Watchdog) load(ctx context.Context, q *store.Queries, need map[uuid.UUID]int64) error {
	var ids []uuid.UUID
	for id, v := range need {
		if j := w.specs[id]; j == nil || (v >= 0 && j.version != v) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if len(w.specs)+len(ids) > maxCachedSpecs {
		// Start afresh, and read every spec this pass needs: those that
		// were current in the old cache are gone with it.
		w.specs = map[uuid.UUID]*jobInfo{}
		ids = slices.Collect(maps.Keys(need))
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	rows, err := q.WatchedJobSpecs(ctx, ids)
	if err != nil {
		return err
	}
	for _, r := range rows {
		j := &jobInfo{version: r.Version, tenant: r.TenantID, namespace: r.Namespace, name: r.Name, timeouts: map[string]time.Duration{}}
		if err := json.Unmarshal(r.Spec, &j.spec); err != nil {
			return fmt.Errorf("job %s: stored spec: %w", r.ID, err)
		}
		for i, st := range j.spec.Steps {
			if !st.OnNoWorker() { // a job step has no timeout (its child run's steps have theirs), nor a parked one
				j.timeouts[st.Name] = j.spec.Effective(i).Timeout
			}
		}
		if s, err := schedule.Parse(j.spec.Schedule); err == nil {
			j.sched = s.For(j.namespace, j.name)
		}
		w.specs[r.ID] = j
	}
	return nil
}
