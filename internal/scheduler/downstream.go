package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/shard"
)

// FailpointDownstreamTx is hit inside the transaction that turns upstream
// runs' ends into downstream runs, once it has written them, before it
// commits.
const FailpointDownstreamTx = "scheduler/downstream-tx"

// FailpointDownstreamEvent, followed by ":" and a run's id, is where the
// transaction of the downstream step meets the event of that run's end:
// an error armed there (failpoint.Set.ErrOn) fails every transaction that
// takes the event.
const FailpointDownstreamEvent = "scheduler/downstream-event"

// Bounds of the downstream step.
const (
	downstreamBatch int32 = 100 // upstream finish events one transaction takes
	// MaxUpstreamDepth bounds a chain of runs started by each other's
	// ends (a cycle that apply could not see: two jobs changed at once).
	MaxUpstreamDepth = 100
	// maxUpstreamOutputs bounds run.upstream.outputs, as JSON.
	maxUpstreamOutputs = 64 << 10
)

// upstreamEnd is one end of a run of an upstream job.
type upstreamEnd struct {
	At      time.Time // the run's end: the downstream run's instant (made unique per job)
	Outcome string
	JSON    []byte // run.upstream
	Depth   int
	// Calls is the upstream run's runs.depth (the runs started by steps
	// above it), carried on to the run it starts: a loop of jobs that
	// runs jobs through their steps and starts them by their ends is
	// bounded by run.MaxCallDepth, as a loop of calls alone is.
	Calls int32
	// Root is the root of the upstream run's tree, which the run it
	// starts joins (docs/workflows.md, "Trees of runs").
	Root uuid.UUID
}

// planStarts decides the runs of a job for the ends of its upstream's
// runs whose outcome it names (schedule.after, trigger upstream), or for
// the events it takes (schedule.event, trigger event: an event's receipt
// is its instant, as an upstream run's end is), oldest first: each is an
// instant of the job, on time or late (older than its catchup window, or
// misfireAfter): the late ones go to its misfire policy, as a schedule's
// missed instants do, and the ones it keeps and the ones on time to its
// overlap policy; an end past the depth limit is recorded skipped. An
// event is never late (what a misfire policy would drop is data, not a
// missed instant): its overlap policy alone applies. Each end gets one
// run record: a run, or a skipped run saying why.
func planStarts(s *schedule.Schedule, spec *dag.JobSpec, ends []upstreamEnd, now time.Time, active []activeRun, misfireAfter time.Duration, trigger lifecycle.Trigger) plan {
	p := plan{Skips: map[skipped]int{}}
	if w := s.CatchupWindow(); w > 0 {
		misfireAfter = w
	}
	var late, onTime []time.Time
	for _, e := range ends {
		switch {
		case trigger == lifecycle.TriggerEvent: // an event is never late: it is data, not an instant of a schedule
			onTime = append(onTime, e.At)
		case e.Depth > MaxUpstreamDepth:
			why := fmt.Sprintf("upstream: a chain of %d runs started by each other's ends (the limit is %d)", e.Depth, MaxUpstreamDepth)
			p.recordSkips([]time.Time{e.At}, skipped{lifecycle.SkippedByUpstream, why}, trigger, false)
		case now.Sub(e.At) > misfireAfter:
			late = append(late, e.At)
		default:
			onTime = append(onTime, e.At)
		}
	}
	var fire []time.Time
	if len(late) > 0 {
		m := lifecycle.DecideMisfire(spec.Misfire, spec.MaxBackfill, late, true)
		p.recordSkips(m.Skip, skipped{lifecycle.SkippedByMisfire, m.Reason}, trigger, false)
		fire = m.Fire
	}
	p.overlap(spec, append(fire, onTime...), trigger, active)
	return p
}

// fireDownstream turns the ends of the shards' upstream runs into the
// runs of the jobs that start after them (schedule.after), in a
// transaction fenced as a firing is: the finish events (FOR UPDATE SKIP
// LOCKED), then the downstream jobs (FOR SHARE, id order) and their
// schedule rows (FOR UPDATE, id order), their active runs, the new runs,
// and the events' deletion, committed together, batch after batch, so a
// crash anywhere leaves the events for the next owner of the shard and
// no run written (docs/workflows.md, "Jobs started by another job's
// outcome").
func (s *Scheduler) fireDownstream(ctx context.Context, leases []*shard.Lease, ids []int32) error {
	step := pendingStep[eventKey]{name: "downstream step", batch: downstreamBatch,
		some: func(ctx context.Context, shards []int32) (bool, error) {
			return store.New(s.cfg.Pool).HasUpstreamFinishes(ctx, shards)
		},
		take: s.downstreamBatch,
		setAside: func(ctx context.Context, k eventKey, err error) error {
			return store.New(s.cfg.Pool).SetAsideUpstreamFinish(ctx, store.SetAsideUpstreamFinishParams{
				RunID: k.RunID, FinishedAt: k.FinishedAt, Error: executor.StorableError(err.Error())})
		}}
	return step.run(ctx, s.cfg.Logger, leases, ids)
}

// eventKey names an upstream_finishes event.
type eventKey struct {
	RunID      uuid.UUID
	FinishedAt time.Time
}

// downstreamBatch is one transaction of fireDownstream, taking at most
// batch events; it returns how many it took, and which (also when it
// failed).
func (s *Scheduler) downstreamBatch(ctx context.Context, leases []*shard.Lease, batch int32) (int, []eventKey, error) {
	taken := 0
	var keys []eventKey
	err := store.InRawTx(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		held, err := s.cfg.Shards.Fence(ctx, tx, leases)
		if err != nil {
			return err
		}
		q := store.New(tx)
		events, err := q.TakeUpstreamFinishes(ctx, store.TakeUpstreamFinishesParams{Shards: shard.Shards(held), Batch: batch})
		if err != nil || len(events) == 0 {
			return err
		}
		taken, keys = len(events), make([]eventKey, len(events))
		for i, e := range events {
			// An end a version before the status failed wrote as
			// dead_lettered: failed, in upstream.outcome too.
			events[i].Status = string(lifecycle.RunStatus(e.Status).Ended())
			keys[i] = eventKey{e.RunID, e.FinishedAt}
			if err := s.cfg.Failpoints.Err(FailpointDownstreamEvent + ":" + e.RunID.String()); err != nil {
				return err
			}
		}
		news, cancel, err := s.downstreamRuns(ctx, q, events)
		if err != nil {
			return err
		}
		if err := s.startRuns(ctx, tx, q, news, cancel); err != nil {
			return err
		}
		// Child runs' ends end the steps that started them (after the
		// downstream jobs' locks: jobs before runs, as a trigger takes them).
		var calls []run.ChildEnd
		for _, e := range events {
			if e.ParentTaskID != nil {
				calls = append(calls, run.ChildEnd{Run: e.RunID, FinishedAt: e.FinishedAt})
			}
		}
		if err := s.applier().FinishCalls(ctx, tx, calls); err != nil {
			return err
		}
		del := store.DeleteUpstreamFinishesParams{}
		for _, e := range events {
			del.RunIds = append(del.RunIds, e.RunID)
			del.FinishedAts = append(del.FinishedAts, e.FinishedAt)
		}
		if err := q.DeleteUpstreamFinishes(ctx, del); err != nil {
			return err
		}
		s.cfg.Failpoints.Hit(FailpointDownstreamTx)
		return nil
	})
	return taken, keys, err
}

// downstreamRuns plans the runs the upstream finish events start, and the
// active runs they cancel.
func (s *Scheduler) downstreamRuns(ctx context.Context, q *store.Queries, events []store.TakeUpstreamFinishesRow) ([]run.New, []uuid.UUID, error) {
	type upKey struct {
		tenant          uuid.UUID
		namespace, name string
	}
	var dp store.DownstreamJobsParams
	seen := map[upKey]bool{}
	for _, e := range events {
		k := upKey{e.TenantID, e.Namespace, e.Name}
		if !seen[k] {
			seen[k] = true
			dp.TenantIds, dp.Namespaces, dp.Names = append(dp.TenantIds, k.tenant), append(dp.Namespaces, k.namespace), append(dp.Names, k.name)
		}
	}
	downs, err := q.DownstreamJobs(ctx, dp)
	if err != nil || len(downs) == 0 {
		return nil, nil, err
	}
	// Their schedule rows, as a firing and a manual trigger lock them (after
	// the jobs row): the overlap policy below weighs the active runs with
	// those of a firing of the same job serialised.
	lock := make([]uuid.UUID, 0, len(downs))
	for _, d := range downs {
		if d.Status == "active" {
			lock = append(lock, d.ID)
		}
	}
	if err := q.LockSchedules(ctx, lock); err != nil {
		return nil, nil, err
	}
	type endKey struct {
		run uuid.UUID
		at  time.Time
	}
	upstreams := map[endKey][]byte{} // run.upstream by upstream run and end (a retried run ends again)
	var news []run.New
	var cancel []uuid.UUID
	now, err := q.DatabaseNow(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range downs {
		if d.Status != "active" {
			continue // paused: nothing starts, as nothing fires
		}
		var ends []upstreamEnd
		for _, e := range events {
			if e.TenantID != d.TenantID || e.Namespace != d.UpstreamNamespace || e.Name != d.UpstreamName || !schedule.Names(d.Outcomes, e.Status) {
				continue
			}
			k := endKey{e.RunID, e.FinishedAt}
			js, ok := upstreams[k]
			if !ok {
				if js, err = upstreamJSON(ctx, q, e); err != nil {
					return nil, nil, err
				}
				upstreams[k] = js
			}
			ends = append(ends, upstreamEnd{At: e.FinishedAt, Outcome: e.Status, JSON: js, Depth: upstreamDepth(e.RunUpstream) + 1, Calls: e.Depth, Root: e.RootRunID})
		}
		if len(ends) == 0 {
			continue
		}
		var spec dag.JobSpec
		if err := json.Unmarshal(d.Spec, &spec); err != nil {
			return nil, nil, fmt.Errorf("job %s: spec: %w", d.ID, err)
		}
		p, byAt, err := s.planFor(ctx, q, d.ID, &spec, ends, now, lifecycle.TriggerUpstream)
		if err != nil {
			return nil, nil, err
		}
		ref := run.JobRef{ID: d.ID, Tenant: d.TenantID, Version: d.Version, Shard: int(d.Shard), Spec: &spec}
		for _, r := range p.Runs {
			e := ends[byAt[r.At]]
			news = append(news, run.New{Job: ref, At: r.At, Trigger: r.Trigger, Status: r.Status, Reason: r.Reason, Epoch: -1, Upstream: e.JSON,
				Depth: int(e.Calls), Root: e.Root})
		}
		cancel = append(cancel, p.Cancel...)
	}
	return news, cancel, nil
}

// planFor plans the runs of job id (of spec) for ends (planStarts), once
// their instants are moved to free ones (uniqueInstants, in place); byAt
// is each planned instant's index in ends.
func (s *Scheduler) planFor(ctx context.Context, q *store.Queries, id uuid.UUID, spec *dag.JobSpec, ends []upstreamEnd, now time.Time,
	trigger lifecycle.Trigger) (p plan, byAt map[time.Time]int, err error) {
	sched, err := schedule.Parse(spec.Schedule)
	if err != nil {
		return plan{}, nil, fmt.Errorf("job %s: schedule: %w", id, err)
	}
	if err := uniqueInstants(ctx, q, id, ends); err != nil {
		return plan{}, nil, err
	}
	if spec.Debounce != nil && trigger != lifecycle.TriggerSchedule {
		// Its runs are debounced (run.Insert): their overlap is weighed
		// when each starts (run.Applier.FireDebounced).
		allow := *spec
		allow.Overlap = dag.OverlapAllow
		spec = &allow
	}
	var activeRows []store.ActiveRunsRow
	if spec.WeighsActiveRuns() { // overlap: allow reads none
		if activeRows, err = q.ActiveRuns(ctx, []uuid.UUID{id}); err != nil {
			return plan{}, nil, err
		}
	}
	active := make([]activeRun, len(activeRows))
	for i, r := range activeRows {
		active[i] = activeRun{ID: r.ID, Status: r.Status}
	}
	byAt = make(map[time.Time]int, len(ends))
	for i, e := range ends {
		byAt[e.At] = i
	}
	return planStarts(sched, spec, ends, now, active, s.cfg.MisfireAfter, trigger), byAt, nil
}

// uniqueInstants moves each end's instant on by a microsecond until the
// job has no run at it (runs are unique per job and instant, and two
// upstream runs may end at one time: cancelled together) and no other
// end of the batch takes it (run.FreeInstants).
func uniqueInstants(ctx context.Context, q *store.Queries, job uuid.UUID, ends []upstreamEnd) error {
	ats := make([]time.Time, len(ends))
	for i, e := range ends {
		ats[i] = e.At
	}
	moved, err := run.FreeInstants(ctx, q, job, ats)
	if err != nil {
		return err
	}
	for i := range ends {
		ends[i].At = moved[i]
	}
	return nil
}

// upstreamJSON is run.upstream for a run that e's end starts: the
// upstream run's end as run.RunEnd describes it (its last steps' outputs
// within maxUpstreamOutputs), and the chain's depth.
func upstreamJSON(ctx context.Context, q *store.Queries, e store.TakeUpstreamFinishesRow) ([]byte, error) {
	end := run.End{Run: e.RunID, Namespace: e.Namespace, Job: e.Name, Outcome: e.Status, FinishedAt: e.FinishedAt}
	return run.RunEnd(ctx, q, end, maxUpstreamOutputs, map[string]any{"depth": upstreamDepth(e.RunUpstream) + 1})
}

// upstreamDepth is the depth recorded in a run's run.upstream (0: a run
// no upstream started).
func upstreamDepth(upstream []byte) int {
	var u struct {
		Depth int `json:"depth"`
	}
	if len(upstream) == 0 || json.Unmarshal(upstream, &u) != nil {
		return 0
	}
	return u.Depth
}
