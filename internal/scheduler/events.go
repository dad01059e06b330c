package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/expr"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/shard"
)

// FailpointEventsTx is hit inside the transaction that turns pending
// events into runs, once it has written them, before it commits.
const FailpointEventsTx = "scheduler/events-tx"

// Bounds of a transaction of the events step: at most eventsBatch
// events, of one tenant at most an even share of them among the tenants
// of the batch before (at least eventsPerTenant: its oldest), the tenants
// taking turns from one batch to the next, so that a tenant's flood does
// not hold up another tenant's events, and a tenant alone takes whole
// batches.
const (
	eventsBatch     int32 = 100
	eventsPerTenant int32 = 10
	// maxEventTries bounds the tries of an event whose transaction fails
	// alone (about 1.3 hours of them, put off 2^tries s, at most 10
	// minutes): then it is no longer pending, its last error kept.
	maxEventTries = 15
)

// fireEvents turns the shards' pending events into the runs of the jobs
// whose schedule.event names their types and whose filters hold, in a
// transaction fenced as a firing is, batch after batch: the events (FOR
// UPDATE SKIP LOCKED), the jobs (FOR SHARE, id order) and their schedule
// rows (FOR UPDATE, id order), their active runs, the new runs (each
// carrying its event), and the events marked matched, committed together,
// so a crash anywhere leaves the events pending for the next owner of the
// shard and no run written (docs/events.md). An event whose transaction
// fails alone is set aside (put off by 2^tries seconds, at most 10
// minutes, its error kept).
func (s *Scheduler) fireEvents(ctx context.Context, leases []*shard.Lease, ids []int32) error {
	step := pendingStep[uuid.UUID]{name: "events step", batch: eventsBatch, partial: true,
		some: func(ctx context.Context, shards []int32) (bool, error) {
			return store.New(s.cfg.Pool).HasPendingEvents(ctx, shards)
		},
		take: s.eventsTx,
		setAside: func(ctx context.Context, id uuid.UUID, err error) error {
			return store.New(s.cfg.Pool).SetAsideEvent(ctx, store.SetAsideEventParams{ID: id, Error: executor.StorableError(err.Error()), MaxTries: maxEventTries})
		}}
	return step.run(ctx, s.cfg.Logger, leases, ids)
}

// eventsTx is one transaction of fireEvents, taking at most batch
// events; it returns how many it took, and which (also when it failed).
func (s *Scheduler) eventsTx(ctx context.Context, leases []*shard.Lease, batch int32) (int, []uuid.UUID, error) {
	var ids []uuid.UUID
	err := store.InRawTx(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		ids = nil
		held, err := s.cfg.Shards.Fence(ctx, tx, leases)
		if err != nil {
			return err
		}
		q := store.New(tx)
		var after uuid.UUID
		if p := s.eventsAfter.Load(); p != nil {
			after = *p
		}
		share := eventsPerTenant
		if n := s.eventsTenants.Load(); n > 0 {
			share = max(share, batch/n)
		}
		events, err := q.TakePendingEvents(ctx, store.TakePendingEventsParams{Shards: shard.Shards(held), Batch: batch,
			PerTenant: min(share, batch), AfterTenant: after})
		if err != nil || len(events) == 0 {
			return err
		}
		last := events[len(events)-1].TenantID
		s.eventsAfter.Store(&last)
		tenants := map[uuid.UUID]bool{}
		// Each event as expressions read it, made once: the runs it
		// starts carry it, filters and waits' matches read it.
		arrivals := make([]run.Arrival, len(events))
		for i, e := range events {
			tenants[e.TenantID] = true
			ids = append(ids, e.ID)
			js, m, err := eventJSON(e)
			if err != nil {
				return err
			}
			arrivals[i] = run.Arrival{Tenant: e.TenantID, Type: e.Type, ReceivedAt: e.ReceivedAt, Event: js, Fields: m}
		}
		s.eventsTenants.Store(int32(len(tenants)))
		news, cancel, err := s.eventRuns(ctx, q, events, arrivals)
		if err != nil {
			return err
		}
		if err := s.startRuns(ctx, tx, q, news, cancel); err != nil {
			return err
		}
		// The waiting steps the events end (docs/parked-steps.md), in the
		// transaction that marks the events taken: each once.
		if _, err := s.applier().EndWaits(ctx, tx, arrivals); err != nil {
			return err
		}
		if err := q.MarkEventsMatched(ctx, ids); err != nil {
			return err
		}
		s.cfg.Failpoints.Hit(FailpointEventsTx)
		return nil
	})
	return len(ids), ids, err
}

// eventJSON is run.event: the event as expressions read it.
func eventJSON(e store.TakePendingEventsRow) ([]byte, map[string]any, error) {
	data, err := expr.FromJSON(e.Data)
	if err != nil {
		return nil, nil, fmt.Errorf("event %s: data: %w", e.ID, err)
	}
	m := map[string]any{"id": e.EventKey, "type": e.Type, "source": e.Source, "time": e.Time.UTC().Format(time.RFC3339Nano)}
	m["data"] = json.RawMessage(e.Data) // as stored, not re-encoded
	js, err := json.Marshal(m)
	m["data"] = data
	return js, m, err
}

// eventRuns plans the runs the events start, and the active runs they
// cancel (a job's overlap policy).
func (s *Scheduler) eventRuns(ctx context.Context, q *store.Queries, events []store.TakePendingEventsRow, arrivals []run.Arrival) ([]run.New, []uuid.UUID, error) {
	type typeKey struct {
		tenant uuid.UUID
		typ    string
	}
	var jp store.EventJobsParams
	seen := map[typeKey]bool{}
	for _, e := range events {
		k := typeKey{e.TenantID, e.Type}
		if !seen[k] {
			seen[k] = true
			jp.TenantIds, jp.Types = append(jp.TenantIds, k.tenant), append(jp.Types, k.typ)
		}
	}
	jobs, err := q.EventJobs(ctx, jp)
	if err != nil || len(jobs) == 0 {
		return nil, nil, err
	}
	lock := make([]uuid.UUID, 0, len(jobs))
	for _, j := range jobs {
		if j.Status == "active" {
			lock = append(lock, j.ID)
		}
	}
	if err := q.LockSchedules(ctx, lock); err != nil {
		return nil, nil, err
	}
	now, err := q.DatabaseNow(ctx)
	if err != nil {
		return nil, nil, err
	}
	byEvent := make(map[uuid.UUID]run.Arrival, len(events))
	for i, e := range events {
		byEvent[e.ID] = arrivals[i]
	}
	var news []run.New
	var cancel []uuid.UUID
	for _, j := range jobs {
		if j.Status != "active" {
			continue // paused: nothing starts, as nothing fires
		}
		var spec dag.JobSpec
		if err := json.Unmarshal(j.Spec, &spec); err != nil { // one job's broken row holds up no other job's runs
			s.cfg.Logger.Error("a job's definition does not read: no event starts it", "job", j.ID, "err", err)
			continue
		}
		if spec.Schedule.Event == nil || spec.Schedule.Event.Type != j.Type {
			continue
		}
		filter, err := dag.CompileEventFilter(spec.Schedule.Event.Filter)
		if err != nil { // refused at apply: a definition older than a bound
			s.cfg.Logger.Error("a job's event filter does not compile: no event starts it", "job", j.ID, "err", err)
			continue
		}
		var ends []upstreamEnd
		var of []uuid.UUID // the event of each end
		for _, e := range events {
			if e.TenantID != j.TenantID || e.Type != j.Type {
				continue
			}
			ok, err := filter.Match(byEvent[e.ID].Fields)
			if err != nil {
				s.cfg.Logger.Warn("a job's event filter failed on an event: it starts no run of the job", "job", j.ID, "event", e.ID, "err", err)
				continue
			}
			if !ok {
				continue
			}
			ends = append(ends, upstreamEnd{At: e.ReceivedAt, JSON: byEvent[e.ID].Event})
			of = append(of, e.ID)
		}
		if len(ends) == 0 {
			continue
		}
		p, byAt, err := s.planFor(ctx, q, j.ID, &spec, ends, now, lifecycle.TriggerEvent)
		if err != nil {
			return nil, nil, err
		}
		ref := run.JobRef{ID: j.ID, Tenant: j.TenantID, Version: j.Version, Shard: int(j.Shard), Spec: &spec}
		for _, r := range p.Runs {
			i := byAt[r.At]
			news = append(news, run.New{Job: ref, At: r.At, Trigger: r.Trigger, Status: r.Status, Reason: r.Reason, Epoch: -1,
				Event: ends[i].JSON, EventID: of[i]})
		}
		cancel = append(cancel, p.Cancel...)
	}
	return news, cancel, nil
}
