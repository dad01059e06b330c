package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/tracing"
	"github.com/orrery-dev/orrery/internal/usage"
)

// JobRef is what a run needs to know of its job.
type JobRef struct {
	ID      uuid.UUID
	Tenant  uuid.UUID
	Version int64
	Shard   int
	Spec    *dag.JobSpec
}

// New is a run to create.
type New struct {
	Job     JobRef
	At      time.Time // the scheduled instant (or the trigger time)
	Trigger lifecycle.Trigger
	Status  lifecycle.RunStatus // pending, queued, skipped or cancelled
	Reason  string
	// Epoch is the shard epoch a scheduler fired it under (0: an API trigger).
	Epoch int64
	// Params are the run's params (dag.JobSpec.RunParams); nil takes the
	// job version's defaults.
	Params dag.Payload
	// Backfill is the backfill that writes it (uuid.Nil for none).
	Backfill uuid.UUID
	// Upstream is run.upstream (JSON) for a run an upstream run started;
	// nil for others.
	Upstream []byte
	// Event is run.event (JSON: id, type, source, time, data) for a run
	// an event started (schedule.event), and EventID the event's id;
	// nil and uuid.Nil for others.
	Event   []byte
	EventID uuid.UUID
	// ParentTask is the job step that starts a child run (trigger
	// parent); uuid.Nil for others. Depth counts the runs above it.
	ParentTask uuid.UUID
	Depth      int
	// Root is the root of the tree of runs it belongs to (a child run's,
	// an after-trigger's run's: docs/workflows.md, "Trees of runs");
	// uuid.Nil for a root.
	Root uuid.UUID
	// By is the principal who triggered it by hand ("" for others): an
	// approval with separate: true refuses them.
	By string
	// NoDebounce starts it now, whatever the job's debounce says (a
	// trigger that ignores the job's overlap policy).
	NoDebounce bool
	// Debounced is set by Insert for a debounced trigger whose run it
	// wrote or joined.
	Debounced *Debounced
}

// Debounced is the debounced run a trigger wrote or joined, as Insert
// left it.
type Debounced struct {
	Key   string    // its key's value ("" for a job without a key)
	At    time.Time // when it starts, unless a later trigger puts it off
	Count int       // how many triggers it took
	// Joined: an earlier trigger wrote it, at ScheduledFor, CreatedAt.
	Joined                  bool
	ScheduledFor, CreatedAt time.Time
}

// Firer is the node that fires scheduled runs, recorded on each run with
// the shard epoch of the run (New.Epoch); nil for runs started through the
// API.
type Firer struct {
	Node uuid.UUID
}

// Insert writes runs in tx: pending and queued ones with all their tasks,
// and the root tasks of pending runs released to their worker pools. A run
// whose (job, instant) exists already is not written (invariant 2). It
// returns the ids of the runs written, in order, uuid.Nil for the others.
// Runs are held to their tenants' storage quotas as rooms (read with
// usage.RunRooms before tx, or outside it) says, and counted in it (pass
// a Clone when tx may be tried again): see holdToQuotas.
//
// A trigger of a job with a debounce writes its run queued, or joins the
// job's debounced run of its key (its id returned): see debounce.
func (a *Applier) Insert(ctx context.Context, tx pgx.Tx, runs []New, by *Firer, rooms usage.Rooms) ([]uuid.UUID, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	ap := a.in(tx)
	d, err := ap.debounce(ctx, runs)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return ap.insert(ctx, runs, by, rooms)
	}
	written, err := ap.insert(ctx, d.write, by, rooms)
	if err != nil {
		return nil, err
	}
	return d.ids(ctx, ap, runs, written)
}

// insert is Insert of runs that debounce has decided.
func (ap *applying) insert(ctx context.Context, runs []New, by *Firer, rooms usage.Rooms) ([]uuid.UUID, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	a := ap.Applier
	tx := ap.tx
	noParams := fillParams(runs)
	overQuota, err := holdToQuotas(runs, by, rooms)
	if err != nil {
		return nil, err
	}
	keys, cancelFor, err := ap.decideKeys(ctx, runs)
	if err != nil {
		return nil, err
	}
	rp := store.InsertRunsParams{}
	if by != nil {
		rp.NodeID = &by.Node
	}
	ids := make([]uuid.UUID, len(runs))
	for i, r := range runs {
		ids[i] = uuid.Must(uuid.NewV7())
		rp.Ids = append(rp.Ids, ids[i])
		rp.TenantIds = append(rp.TenantIds, r.Job.Tenant)
		rp.JobIds = append(rp.JobIds, r.Job.ID)
		rp.JobVersions = append(rp.JobVersions, r.Job.Version)
		rp.Shards = append(rp.Shards, int32(r.Job.Shard))
		epoch := r.Epoch
		if by == nil {
			epoch = -1 // stored as NULL (as a firer's run of a shard it does not fence)
		}
		rp.ShardEpochs = append(rp.ShardEpochs, epoch)
		rp.ScheduledFors = append(rp.ScheduledFors, r.At)
		rp.Triggers = append(rp.Triggers, string(r.Trigger))
		rp.Statuses = append(rp.Statuses, string(r.Status))
		rp.Reasons = append(rp.Reasons, r.Reason)
		tp := ""
		if r.Status == lifecycle.RunPending || r.Status == lifecycle.RunQueued {
			tp = tracing.StartRun(ctx, attribute.String("orrery.run_id", ids[i].String()), attribute.String("orrery.job_id", r.Job.ID.String()),
				attribute.String("orrery.trigger", string(r.Trigger)), attribute.String("orrery.scheduled_for", r.At.UTC().Format(time.RFC3339Nano)))
		}
		rp.TraceParents = append(rp.TraceParents, tp)
		rp.Watched = append(rp.Watched, withTasks(r) && r.Job.Spec.Watched())
		tasks := 0
		if withTasks(r) {
			tasks = len(r.Job.Spec.Steps)
		}
		rp.TaskCounts = append(rp.TaskCounts, int64(tasks))
		rp.Params = append(rp.Params, string(r.Params))
		rp.BackfillIds = append(rp.BackfillIds, r.Backfill)
		rp.Upstreams = append(rp.Upstreams, string(r.Upstream))
		rp.ParentTaskIds = append(rp.ParentTaskIds, r.ParentTask)
		rp.Depths = append(rp.Depths, int32(r.Depth))
		rp.RootRunIds = append(rp.RootRunIds, r.Root)
		rp.Events = append(rp.Events, string(r.Event))
		rp.EventIds = append(rp.EventIds, r.EventID)
		rp.TriggeredBys = append(rp.TriggeredBys, r.By)
		ck := ""
		if keys != nil {
			ck = keys[i]
		}
		rp.ConcurrencyKeys = append(rp.ConcurrencyKeys, ck)
	}
	written, err := ap.q.InsertRuns(ctx, rp)
	if err != nil {
		return nil, err
	}
	ok := make(map[uuid.UUID]bool, len(written))
	for _, id := range written {
		ok[id] = true
	}
	var cancelled []uuid.UUID // the holders cancel_running cancels, for the new runs written
	for i, held := range cancelFor {
		if ok[rp.Ids[i]] {
			cancelled = append(cancelled, held...)
		}
	}
	if len(cancelled) > 0 {
		if _, err := a.Cancel(ctx, tx, cancelled, "concurrency: cancel_running (a newer run of its key)"); err != nil {
			return nil, err
		}
	}
	bindings, err := bindingsOf(ctx, ap.q, runs, ok, ids)
	if err != nil {
		return nil, err
	}
	profiles, err := profilesOf(ctx, ap.q, runs, ok, ids)
	if err != nil {
		return nil, err
	}
	tp := store.InsertTasksParams{}
	ep := store.InsertEdgesParams{}
	var ready []dispatch.Ready
	var decide []candidate // roots with a condition or a fan-out
	for i, r := range runs {
		if !ok[ids[i]] {
			ids[i] = uuid.Nil
			continue
		}
		if r.Status == lifecycle.RunCancelled || r.Status == lifecycle.RunFailed { // cancelled by a newer run; its keys did not evaluate
			a.finished(tx, r.Status)
		}
		if overQuota != nil && overQuota[i] || noParams != nil && noParams[i] {
			a.finished(tx, lifecycle.RunSkipped)
		}
		if !withTasks(r) {
			continue
		}
		stepIDs := make(map[string]uuid.UUID, len(r.Job.Spec.Steps))
		for _, st := range r.Job.Spec.Steps {
			stepIDs[st.Name] = uuid.Must(uuid.NewV7())
		}
		for k, st := range r.Job.Spec.Steps {
			set := r.Job.Spec.Effective(k)
			queue := bindings.Queue(r.Job.Tenant, set.Queue)
			if st.Run.Worker != "" {
				queue = dispatch.RemoteQueue(set.Queue, r.Job.Tenant)
			}
			status := lifecycle.TaskWaiting
			// (keys are decided at release, as a condition is)
			conditional, fanOut, jobStep := st.When != "" || len(st.Concurrency) > 0 || st.RateLimit != nil, st.ForEach != "", st.OnNoWorker()
			res := set.Resources
			if set.ResourceProfile != "" {
				res = profiles[tenantProfile{r.Job.Tenant, set.ResourceProfile}]
			}
			if jobStep { // it runs nothing itself: its child run's steps ask
				res = resources.Vector{}
			}
			switch {
			case len(st.Needs) > 0 || r.Status != lifecycle.RunPending:
			case conditional || fanOut || jobStep: // decided, expanded or started below, once written
				decide = append(decide, candidate{dispatch.NextAttempt(stepIDs[st.Name], r.Job.Tenant, queue, int32(set.Priority), 0).WithNeed(res), ids[i], st.Name, conditional, fanOut, jobStep})
			default:
				status = lifecycle.TaskQueued
				ready = append(ready, dispatch.NextAttempt(stepIDs[st.Name], r.Job.Tenant, queue, int32(set.Priority), 0).WithNeed(res))
			}
			tp.Conditionals = append(tp.Conditionals, conditional)
			tp.FanOuts = append(tp.FanOuts, fanOut)
			tp.JobSteps = append(tp.JobSteps, jobStep)
			tp.Ids = append(tp.Ids, stepIDs[st.Name])
			tp.TenantIds = append(tp.TenantIds, r.Job.Tenant)
			tp.RunIds = append(tp.RunIds, ids[i])
			tp.Steps = append(tp.Steps, st.Name)
			tp.Statuses = append(tp.Statuses, string(status))
			tp.ParentsRemaining = append(tp.ParentsRemaining, int32(len(st.Needs)))
			tp.Queues = append(tp.Queues, queue)
			tp.Priorities = append(tp.Priorities, int32(set.Priority))
			tp.TriggerRules = append(tp.TriggerRules, string(st.TriggerRule))
			addResources(&tp, res)
			for _, need := range st.Needs {
				ep.Parents = append(ep.Parents, stepIDs[need])
				ep.Children = append(ep.Children, stepIDs[st.Name])
			}
		}
	}
	// Which first steps skip the wait for admission: written admitted.
	if err := a.Dispatcher.Direct(ctx, tx, ready); err != nil {
		return nil, err
	}
	direct := make(map[uuid.UUID]bool, len(ready))
	for _, r := range ready {
		direct[r.TaskID] = r.Admitted
	}
	tp.Admitted = make([]bool, len(tp.Ids))
	for i, id := range tp.Ids {
		tp.Admitted[i] = direct[id]
	}
	if len(tp.Ids) > 0 {
		if err := ap.q.InsertTasks(ctx, tp); err != nil {
			return nil, err
		}
	}
	if len(ep.Parents) > 0 {
		if err := ap.q.InsertEdges(ctx, ep); err != nil {
			return nil, err
		}
	}
	if err := a.Dispatcher.Release(ctx, tx, ready); err != nil {
		return nil, err
	}
	if len(decide) > 0 {
		if err := ap.release(ctx, decide); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// withTasks says whether a run is written with its tasks: pending and
// queued ones are; skipped and cancelled ones are a record only.
func withTasks(r New) bool {
	return r.Status == lifecycle.RunPending || r.Status == lifecycle.RunQueued
}

// fillParams gives the runs given no params (scheduled ones) of a job
// that declares params the defaults, and skips them when a param has no
// default: the instant is on record, its reason naming the param
// (invariant 7). It marks the runs it skipped.
func fillParams(runs []New) []bool {
	var skipped []bool
	for i := range runs {
		r := &runs[i]
		if r.Params != nil || !withTasks(*r) || len(r.Job.Spec.Params) == 0 {
			continue
		}
		reason := ""
		if name := r.Job.Spec.RequiredParam(); name != "" {
			reason = fmt.Sprintf("param %s has no default, and a %s run gives no params", name, r.Trigger)
		} else if p, err := r.Job.Spec.RunParams(nil); err != nil { // the defaults, checked when the job was
			reason = "the job's param defaults: " + err.Error()
		} else {
			r.Params = p
			continue
		}
		r.Status, r.Reason = lifecycle.RunSkipped, reason
		if skipped == nil {
			skipped = make([]bool, len(runs))
		}
		skipped[i] = true
	}
	return skipped
}

// holdToQuotas holds runs to their tenants' storage quotas (package
// usage), as rooms says, in order: a scheduled run (by a Firer) that would
// pass one is written skipped, without tasks, its reason naming the quota,
// and marked in the answer; a run started through the API is refused with
// the *usage.ExceededError.
func holdToQuotas(runs []New, by *Firer, rooms usage.Rooms) ([]bool, error) {
	if len(rooms) == 0 {
		return nil, nil
	}
	over := make([]bool, len(runs))
	for i := range runs {
		r := &runs[i]
		if !withTasks(*r) {
			_ = rooms.Add(r.Job.Tenant, usage.Usage{Runs: 1}) // a record counts as a run
			continue
		}
		err := rooms.Add(r.Job.Tenant, usage.Usage{Runs: 1, Tasks: int64(len(r.Job.Spec.Steps))})
		var exceeded *usage.ExceededError
		switch {
		case err == nil:
		case by == nil || !errors.As(err, &exceeded):
			return nil, err
		default:
			r.Status, over[i] = lifecycle.RunSkipped, true
			r.Reason = fmt.Sprintf("storage quota: tenant %s holds %d of its %s %d", exceeded.Tenant, exceeded.Used, exceeded.Quota, exceeded.Limit)
			_ = rooms.Add(r.Job.Tenant, usage.Usage{Runs: 1})
		}
	}
	return over, nil
}

// TenantsOf lists the tenants of runs that would be written with tasks:
// those whose rooms Insert needs (usage.RunRooms).
func TenantsOf(runs []New) []uuid.UUID {
	var out []uuid.UUID
	for _, r := range runs {
		if withTasks(r) {
			out = append(out, r.Job.Tenant)
		}
	}
	return out
}

// bindingsOf reads the queue bindings of the tenants whose runs were
// written with tasks (pending or queued), in tx; none when there are none.
func bindingsOf(ctx context.Context, q *store.Queries, runs []New, written map[uuid.UUID]bool, ids []uuid.UUID) (dispatch.Bindings, error) {
	var tenants []uuid.UUID
	for i, r := range runs {
		if written[ids[i]] && withTasks(r) {
			tenants = append(tenants, r.Job.Tenant)
		}
	}
	if len(tenants) == 0 {
		return nil, nil
	}
	return dispatch.LoadBindings(ctx, q, tenants)
}
