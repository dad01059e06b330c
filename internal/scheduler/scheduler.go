package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/tracing"
	"github.com/orrery-dev/orrery/internal/usage"
	"github.com/orrery-dev/orrery/shard"
)

// Config configures a Scheduler.
type Config struct {
	Pool       *pgxpool.Pool
	Shards     *shard.Manager
	Dispatcher *dispatch.Dispatcher
	// Batch is how many due jobs one transaction takes; default 500.
	Batch int
	// Parallel is how many groups of shards are fired at once; default 2.
	Parallel int
	// MisfireAfter is how late an instant may be and still fire as on time;
	// later ones go to the job's misfire policy. Default 1 minute.
	MisfireAfter time.Duration
	// MaxSleep bounds the wait between passes, hence how soon a newly
	// created job that is due at once is seen; default 200 ms.
	MaxSleep time.Duration
	Logger   *slog.Logger
	// Failpoints arms FailpointFireTx and FailpointFireLocked; nil in
	// production.
	Failpoints *failpoint.Set
	// Metrics records firing transactions and skipped instants; nil: none.
	Metrics *metrics.Metrics
}

// FailpointFireTx is hit inside the firing transaction, once the shards'
// fence holds its locks and before the due jobs are read.
const FailpointFireTx = "scheduler/fire-tx"

// FailpointBackfillTx is hit inside a backfill transaction once it has
// written a step of its backfills (runs and cursors), before it commits.
const FailpointBackfillTx = "scheduler/backfill-tx"

// FailpointFireLocked is hit inside the firing transaction once it holds
// the schedule rows of a batch of due jobs, before it writes their runs.
const FailpointFireLocked = "scheduler/fire-locked"

func (c *Config) withDefaults() error {
	switch {
	case c.Pool == nil:
		return errors.New("scheduler: Config.Pool is required")
	case c.Shards == nil:
		return errors.New("scheduler: Config.Shards is required")
	case c.Dispatcher == nil:
		return errors.New("scheduler: Config.Dispatcher is required")
	}
	if c.Batch == 0 {
		c.Batch = 500
	}
	if c.Parallel == 0 {
		c.Parallel = 2
	}
	if c.MisfireAfter == 0 {
		c.MisfireAfter = time.Minute
	}
	if c.MaxSleep == 0 {
		c.MaxSleep = 200 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Scheduler fires the due jobs of the shards its node owns.
type Scheduler struct {
	cfg Config
	// eventsAfter is the tenant whose events the events step took last:
	// the next batch starts with the tenant after it (fireEvents).
	eventsAfter atomic.Pointer[uuid.UUID]
	// eventsTenants is how many tenants the events step's last batch took
	// events of (0: none yet): each takes an even share of the next.
	eventsTenants atomic.Int32
}

// New returns a Scheduler; Run starts it.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return &Scheduler{cfg: cfg}, nil
}

// Run fires due jobs until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	for {
		sleep, err := s.pass(ctx)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("scheduler pass failed", "err", err)
			sleep = time.Second
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-s.cfg.Shards.Changed():
		case <-t.C:
		}
		t.Stop()
	}
}

// pass fires every owned shard that has a job due and returns how long to
// wait before the next pass.
func (s *Scheduler) pass(ctx context.Context) (time.Duration, error) {
	leases := s.cfg.Shards.Leases()
	if len(leases) == 0 {
		return s.cfg.MaxSleep, nil
	}
	byShard := make(map[int]*shard.Lease, len(leases))
	ids := make([]int32, len(leases))
	for i, l := range leases {
		byShard[l.Shard] = l
		ids[i] = int32(l.Shard)
	}
	// Backfills move on, and upstream runs' ends start their downstream
	// runs, after the due instants fire; a step that fails is logged, not
	// a reason to stop firing.
	defer func() {
		if err := s.advanceBackfills(ctx, leases, ids); err != nil && !errors.Is(err, shard.ErrLost) && ctx.Err() == nil {
			s.cfg.Logger.Error("backfill step failed", "err", err)
		}
		if err := s.fireDownstream(ctx, leases, ids); err != nil && !errors.Is(err, shard.ErrLost) && ctx.Err() == nil {
			s.cfg.Logger.Error("downstream step failed", "err", err)
		}
		if err := s.fireEvents(ctx, leases, ids); err != nil && !errors.Is(err, shard.ErrLost) && ctx.Err() == nil {
			s.cfg.Logger.Error("events step failed", "err", err)
		}
		if err := s.startCalls(ctx, leases, ids); err != nil && !errors.Is(err, shard.ErrLost) && ctx.Err() == nil {
			s.cfg.Logger.Error("job steps' calls failed", "err", err)
		}
		if err := s.wakeParked(ctx, leases, ids); err != nil && !errors.Is(err, shard.ErrLost) && ctx.Err() == nil {
			s.cfg.Logger.Error("parked steps' wake failed", "err", err)
		}
		if err := s.fireDebounced(ctx, leases, ids); err != nil && !errors.Is(err, shard.ErrLost) && ctx.Err() == nil {
			s.cfg.Logger.Error("debounce step failed", "err", err)
		}
		if err := s.cancelPending(ctx, leases, ids); err != nil && !errors.Is(err, shard.ErrLost) && ctx.Err() == nil {
			s.cfg.Logger.Error("pending cancels failed", "err", err)
		}
	}()
	heads, err := store.New(s.cfg.Pool).ShardHeads(ctx, ids)
	if err != nil {
		return 0, err
	}
	sleep := s.cfg.MaxSleep
	var due []*shard.Lease
	for _, h := range heads {
		if wait := h.NextFireAt.Sub(h.Now); wait > 0 {
			sleep = min(sleep, wait)
		} else {
			due = append(due, byShard[int(h.Shard)])
		}
	}
	if len(due) == 0 {
		return max(sleep, time.Millisecond), nil
	}
	// Fire the due shards in Parallel groups; each group fires its shards
	// together, a batch of due jobs per transaction.
	groups := make([][]*shard.Lease, min(s.cfg.Parallel, len(due)))
	for i, l := range due {
		groups[i%len(groups)] = append(groups[i%len(groups)], l)
	}
	var wg sync.WaitGroup
	var failed sync.Once
	var failure error
	for _, g := range groups {
		wg.Go(func() {
			if err := s.fireShards(ctx, g); err != nil {
				failed.Do(func() { failure = err })
			}
		})
	}
	wg.Wait()
	return 0, failure // look again at once: more may be due
}

// fireShards fires the due jobs of a group of shards, batch by batch,
// dropping the shards whose fence fails. The first batch takes the oldest
// due jobs (store DueJobs); once a batch comes back full, a backlog is
// draining and the next ones, while more than one tenant has due jobs,
// take them tenant by tenant, by weight (DueJobsFair), so that a tenant's
// few due instants wait at most one batch behind another's backlog.
func (s *Scheduler) fireShards(ctx context.Context, leases []*shard.Lease) error {
	for fair := false; len(leases) > 0; fair = true {
		n, err := s.createRunsForDueJobs(ctx, leases, fair)
		if errors.Is(err, shard.ErrLost) {
			return nil // all of them lost: Fence dropped them
		}
		if err != nil {
			return err
		}
		if n < s.cfg.Batch {
			return nil
		}
		// Those Fence found lost, or lost since: their Done is closed.
		leases = slices.DeleteFunc(leases, func(l *shard.Lease) bool {
			select {
			case <-l.Done():
				return true
			default:
				return false
			}
		})
	}
	return nil
}

// dueJob is a due job, its schedule row locked, with its definition.
type dueJob struct {
	due   store.DueJobsRow
	row   store.FiringJobsRow
	spec  dag.JobSpec
	sched *schedule.Schedule
}

// createRunsForDueJobs commits one batch of the shards' due jobs (oldest
// first, or tenant by tenant when fair): runs, tasks, River jobs,
// cancellations and next fire times, fenced by each shard's epoch
// (shard.Fence: the shards found lost are left out). It returns how many
// jobs it took.
func (s *Scheduler) createRunsForDueJobs(ctx context.Context, leases []*shard.Lease, fair bool) (int, error) {
	var taken int
	var skips map[skipped]int
	firing := s.cfg.Metrics.FiringBatch()
	ctx, span := tracing.Tracer().Start(ctx, "orrery.fire", trace.WithAttributes(attribute.Int("orrery.shards", len(leases))))
	defer span.End()
	err := store.InRawTx(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		// This try's counts, not an aborted one's.
		skips = nil
		q := store.New(tx)
		held, err := s.cfg.Shards.Fence(ctx, tx, leases)
		if err != nil {
			return err
		}
		byShard := make(map[int]*shard.Lease, len(held))
		for _, l := range held {
			byShard[l.Shard] = l
		}
		ids := shard.Shards(held)
		s.cfg.Failpoints.Hit(FailpointFireTx)
		rows, err := s.dueJobs(ctx, q, ids, fair)
		if err != nil || len(rows) == 0 {
			taken = 0
			return err
		}
		s.cfg.Failpoints.Hit(FailpointFireLocked)
		now := rows[0].Now
		jobIDs := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			jobIDs[i] = r.JobID
		}
		defs, err := q.FiringJobs(ctx, jobIDs)
		if err != nil {
			return err
		}
		byID := make(map[uuid.UUID]store.FiringJobsRow, len(defs))
		for _, d := range defs {
			byID[d.ID] = d
		}
		jobs := make([]dueJob, 0, len(rows))
		for _, r := range rows {
			def, ok := byID[r.JobID]
			if !ok {
				return fmt.Errorf("job %s: schedule row without its job", r.JobID)
			}
			d := dueJob{due: r, row: def}
			if err := json.Unmarshal(def.Spec, &d.spec); err != nil {
				return fmt.Errorf("job %s: spec: %w", r.JobID, err)
			}
			if d.sched, err = schedule.Parse(d.spec.Schedule); err != nil {
				return fmt.Errorf("job %s: schedule: %w", r.JobID, err)
			}
			d.sched = d.sched.For(def.Namespace, def.Name)
			jobs = append(jobs, d)
		}
		weighed := make([]uuid.UUID, 0, len(jobs)) // overlap: allow reads none
		for _, j := range jobs {
			if j.spec.WeighsActiveRuns() {
				weighed = append(weighed, j.row.ID)
			}
		}
		var activeRows []store.ActiveRunsRow
		if len(weighed) > 0 {
			if activeRows, err = q.ActiveRuns(ctx, weighed); err != nil {
				return err
			}
		}
		active := map[uuid.UUID][]activeRun{}
		for _, a := range activeRows {
			active[a.JobID] = append(active[a.JobID], activeRun{ID: a.ID, Status: a.Status})
		}

		var news []run.New
		var cancel []uuid.UUID
		adv := store.AdvanceJobsParams{}
		skips = map[skipped]int{}
		lag := map[int32]float64{}
		for _, j := range jobs {
			pending := *j.due.NextFireAt
			lag[j.due.Shard] = max(lag[j.due.Shard], now.Sub(pending).Seconds())
			p := planJob(j.sched, &j.spec, pending, now, active[j.row.ID], s.cfg.MisfireAfter)
			ref := run.JobRef{ID: j.row.ID, Tenant: j.row.TenantID, Version: j.row.Version, Shard: int(j.due.Shard), Spec: &j.spec}
			epoch := byShard[int(j.due.Shard)].Epoch
			for _, r := range p.Runs {
				news = append(news, run.New{Job: ref, At: r.At, Trigger: r.Trigger, Status: r.Status, Reason: r.Reason, Epoch: epoch})
			}
			for k, v := range p.Skips {
				skips[k] += v
			}
			cancel = append(cancel, p.Cancel...)
			adv.Ids = append(adv.Ids, j.row.ID)
			adv.Nexts = append(adv.Nexts, p.Next)
			adv.Done = append(adv.Done, p.Done)
		}
		if _, err := s.applier().Cancel(ctx, tx, cancel, lifecycle.ReasonCancelledByNewer); err != nil {
			return err
		}
		// The tenants' storage quotas, read on a connection of their own:
		// in this transaction, the read of every shard's usage row would
		// conflict with every other writer of the tenant (serializable).
		rooms, err := usage.RunRooms(ctx, store.New(s.cfg.Pool), run.TenantsOf(news))
		if err != nil {
			return err
		}
		if _, err := s.applier().Insert(ctx, tx, news, &run.Firer{Node: s.cfg.Shards.NodeID()}, rooms); err != nil {
			return err
		}
		if err := q.AdvanceJobs(ctx, adv); err != nil {
			return err
		}
		lp := store.SetShardLagsParams{Node: s.cfg.Shards.NodeID()}
		for id, v := range lag {
			lp.Ids, lp.Lags = append(lp.Ids, id), append(lp.Lags, v)
		}
		if err := q.SetShardLags(ctx, lp); err != nil {
			return err
		}
		taken = len(rows)
		return nil
	})
	span.SetAttributes(attribute.Int("orrery.due_jobs", taken))
	if err == nil {
		for k, v := range skips {
			s.cfg.Logger.Info("instants skipped", "reason", k.reason, "count", v)
			s.cfg.Metrics.InstantsSkipped(string(k.cause), v)
		}
		firing(taken > 0)
	}
	return taken, err
}

// advanceBackfills moves the running backfills of the shards on
// (run.Applier.AdvanceBackfills), in a transaction fenced as a firing is.
func (s *Scheduler) advanceBackfills(ctx context.Context, leases []*shard.Lease, ids []int32) error {
	tenants, err := store.New(s.cfg.Pool).RunningBackfillTenants(ctx, ids)
	if err != nil || len(tenants) == 0 {
		return err
	}
	rooms, err := usage.RunRooms(ctx, store.New(s.cfg.Pool), tenants)
	if err != nil {
		return err
	}
	return store.InRawTx(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		held, err := s.cfg.Shards.Fence(ctx, tx, leases)
		if err != nil {
			return err
		}
		epochs := make(map[int]int64, len(held))
		for _, l := range held {
			epochs[l.Shard] = l.Epoch
		}
		if _, err := s.applier().AdvanceBackfills(ctx, tx, shard.Shards(held), epochs, &run.Firer{Node: s.cfg.Shards.NodeID()}, rooms); err != nil {
			return err
		}
		s.cfg.Failpoints.Hit(FailpointBackfillTx)
		return nil
	})
}

// dueJobs locks a batch of the shards' due schedule rows: tenant by
// tenant when fair and more than one tenant has a due job, else oldest
// first.
func (s *Scheduler) dueJobs(ctx context.Context, q *store.Queries, shards []int32, fair bool) ([]store.DueJobsRow, error) {
	if fair {
		several, err := q.SeveralTenantsDue(ctx, shards)
		if err != nil {
			return nil, err
		}
		fair = several
	}
	if !fair {
		return q.DueJobs(ctx, store.DueJobsParams{Shards: shards, Batch: int32(s.cfg.Batch)})
	}
	rows, err := q.DueJobsFair(ctx, store.DueJobsFairParams{Shards: shards, Batch: int32(s.cfg.Batch)})
	out := make([]store.DueJobsRow, len(rows))
	for i, r := range rows {
		out[i] = store.DueJobsRow(r)
	}
	return out, err
}

// applier writes the runs a firing creates or cancels.
func (s *Scheduler) applier() *run.Applier {
	return &run.Applier{Dispatcher: s.cfg.Dispatcher, Metrics: s.cfg.Metrics, Failpoints: s.cfg.Failpoints}
}
