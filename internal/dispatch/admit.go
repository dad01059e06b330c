package dispatch

import (
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/store"
)

// Admission decides which waiting tasks of a queue go to River now.
//
// # What a queue may hold
//
// A task holds a slot of its queue from its admission until its attempt
// ends (admitted_at set, status queued, running or retrying): counted in
// the database, so a crashed worker's slots come back when the reaper ends
// its lapsed attempts, within the lease TTL, and no process's memory is
// the source of truth. A queue may hold InFlightPerSlot tasks per slot its
// live workers advertise (workers.queues): River keeps about one job ready
// behind each running one, so a worker that finishes fetches its next job
// without waiting for an admission pass, and work released later waits
// behind at most that one job per slot. A queue no live worker serves
// admits nothing.
//
// A tenant's max_concurrency (0: none) caps its tasks holding slots in all
// queues, a tenant_queue_quotas row its tasks in one queue; both are read
// at every pass, so a change applies at the next one.
//
// # How it chooses
//
// Free slots go one at a time to the waiting tenant with the smallest
// weighted dominant share (docs/resources.md; with tasks that ask for no
// resources, the fewest slots held per unit of weight: weighted max-min
// fairness), recomputed from the database at every pass (no deficit to
// lose in a crash); a tenant at one of its quotas gets none, and one whose
// tasks cannot go now leaves its turn to the next (chooser.read). A task
// that has waited AdmitConfig.ReserveAfter may hold back the room it
// needs (chooser.take). Once every tenant is backlogged, each holds
// slots in proportion to its weight, and with tasks of similar length gets
// that share of the starts; a lone tenant gets every slot. Inside a
// tenant, tasks go by priority (critical, high, normal, low), oldest first
// within one priority; a task that has waited longer than the aging bound
// (AdmitConfig.Aging, default 5 minutes) goes before any fresher task of
// any priority, oldest first.
//
// # The admission transaction and its locks
//
// One transaction per pass and queue, in this order:
//  1. the queue's row in queues, FOR UPDATE SKIP LOCKED: one admitter at a
//     time decides for a queue; another that finds it locked skips the
//     pass and looks again shortly, so nothing waits on it;
//  2. read the live workers' slots and the queue's slots held per tenant;
//  3. the rows of the waiting tenants that have max_concurrency, FOR NO KEY
//     UPDATE SKIP LOCKED in id order (a tenant whose row an admitter of
//     another queue holds sits this pass out, and the queue is looked at
//     again shortly; foreign-key checks do not conflict), then their slots
//     held in all queues;
//  4. the advisory locks of the candidates' rate limit keys, each tried
//     (pg_try_advisory_xact_lock: a key another admitter holds leaves its
//     tasks for a later pass), and their buckets' rows (rates.go);
//  5. the chosen task rows, by UPDATE ... SET admitted_at, which skips a
//     task cancelled meanwhile, then the rows of the tasks a rate limit
//     lines up (FOR NO KEY UPDATE SKIP LOCKED) and the buckets';
//  6. the River jobs: in this transaction when River shares the database,
//     else their outbox rows, which Relay inserts after the commit (see the
//     package doc).
//
// No other transaction takes a queue row, and none takes tenant rows after
// task rows, so there is no lock cycle, and no admitter waits on another.
// A paused admitter holds its rows until the pools' idle-in-transaction
// timeout ends its session (meanwhile its queue, and its quota'd tenants in
// other queues, wait); a killed one's are free at once; either way nothing
// is admitted twice, since the marks and the River jobs (or their outbox
// rows) commit together.
//
// What admission does not promise: a quota lowered below what a tenant
// holds does not stop running work; a slot freed by a cancellation or a
// lapsed lease is reused while the old attempt may still run on its worker
// until its next heartbeat; a pass that read a tenant's quota as none just
// before it was set admits that pass without it. With more than 10,000
// tenants waiting in one queue, a pass considers the first 10,000 by id.
//
// Hot path cost: a task that waits is written once more (the admission
// mark), and each batch of releases and of finishes wakes a pass. A task
// released into a queue where nothing waits skips all that (Direct),
// unless it has a rate limit. A task a rate limit refuses is written once
// more (its place in line), and not read until its place comes.
const (
	// InFlightPerSlot is how many tasks a queue may hold per worker slot.
	InFlightPerSlot = 2
	// DefaultAging is AdmitConfig.Aging's default.
	DefaultAging = 5 * time.Minute
	// DefaultReserveAfter is AdmitConfig.ReserveAfter's default (as the
	// worker's gate reserves for a task waiting at it).
	DefaultReserveAfter = 10 * time.Second
	// admitBatch bounds the tasks one pass admits.
	admitBatch = 1000
)

// FailpointAdmitted is hit when an admission pass has marked its tasks and
// inserted their River jobs, before its transaction commits.
const FailpointAdmitted = "dispatch/admitted"

// AdmitConfig configures Admit.
type AdmitConfig struct {
	// Pool is Orrery's state database.
	Pool *pgxpool.Pool
	// Queues are looked at every PollInterval (the queues this process's
	// workers serve: their finishes free slots, and retries become ready
	// with time); other queues when a release wakes them, and then every
	// PollInterval while they have tasks waiting.
	Queues []string
	// PollInterval: default 25 ms.
	PollInterval time.Duration
	// Aging: see the admission doc; default 5 minutes.
	Aging time.Duration
	// ReserveAfter is how long a task waits before it may hold back the
	// room it needs (see choose); default DefaultReserveAfter.
	ReserveAfter time.Duration
	Logger       *slog.Logger
	Failpoints   *failpoint.Set
}

func (c *AdmitConfig) withDefaults() error {
	switch {
	case c.Pool == nil:
		return errors.New("dispatch: AdmitConfig.Pool is required")
	case c.PollInterval < 0 || c.Aging < 0 || c.ReserveAfter < 0:
		return errors.New("dispatch: AdmitConfig.PollInterval, Aging and ReserveAfter must not be negative")
	}
	if c.PollInterval == 0 {
		c.PollInterval = 25 * time.Millisecond
	}
	if c.Aging == 0 {
		c.Aging = DefaultAging
	}
	if c.ReserveAfter == 0 {
		c.ReserveAfter = DefaultReserveAfter
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// wake is the set of queues to look at and the signal that it grew, and
// the one timer a queue has for a later look (KickAt).
type wake struct {
	mu     *sync.Mutex
	queues map[string]bool
	ch     chan struct{}
	timers map[string]*timedKick
}

// timedKick is a queue's later look: its timer, and when it fires.
type timedKick struct {
	timer *time.Timer
	at    time.Time
}

func newWake() wake {
	return wake{mu: &sync.Mutex{}, queues: map[string]bool{}, ch: make(chan struct{}, 1), timers: map[string]*timedKick{}}
}

// kickAt asks for a look at a queue in a while (pacing only), at the
// database's instant at, keeping one timer a queue: the earliest asked
// for.
func (d *Dispatcher) kickAt(queue string, at time.Time, in time.Duration) {
	d.wake.mu.Lock()
	defer d.wake.mu.Unlock()
	if k := d.wake.timers[queue]; k != nil {
		if !at.Before(k.at) {
			return
		}
		k.timer.Stop()
	}
	k := &timedKick{at: at}
	k.timer = time.AfterFunc(max(in, 0), func() {
		d.wake.mu.Lock()
		if d.wake.timers[queue] == k {
			delete(d.wake.timers, queue)
		}
		d.wake.mu.Unlock()
		d.Kick(queue)
	})
	d.wake.timers[queue] = k
}

// Kick asks this process's admitter to look at a queue now: tasks were
// released into it, or slots of it freed.
func (d *Dispatcher) Kick(queue string) {
	d.wake.mu.Lock()
	d.wake.queues[queue] = true
	d.wake.mu.Unlock()
	select {
	case d.wake.ch <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) kicked() []string {
	d.wake.mu.Lock()
	defer d.wake.mu.Unlock()
	out := slices.Collect(maps.Keys(d.wake.queues))
	clear(d.wake.queues)
	return out
}

// Admit runs admission passes until ctx ends: for a queue when Kick wakes
// it, and every PollInterval for cfg.Queues and for the queues woken here
// that still have tasks waiting.
func (d *Dispatcher) Admit(ctx context.Context, cfg AdmitConfig) error {
	if err := cfg.withDefaults(); err != nil {
		return err
	}
	t := time.NewTicker(cfg.PollInterval)
	defer t.Stop()
	ensured := map[string]bool{}
	// The queues polled: cfg.Queues, and those woken since while they
	// still have tasks waiting (slots may free up in another process). A
	// queue whose polls admit nothing (full, its tenants at their quotas)
	// is polled less often, up to maxPollBackoff; a wake-up resets it.
	watched := map[string]bool{}
	for _, q := range cfg.Queues {
		watched[q] = true
	}
	// Counted in polls (pacing only: no decision reads this clock).
	backoff := map[string]int{}
	skip := map[string]int{}
	maxBackoff := max(1, int(maxPollBackoff/cfg.PollInterval))
	for {
		var queues []string
		polled := map[string]bool{}
		select {
		case <-ctx.Done():
			return nil
		case <-d.wake.ch:
			queues = d.kicked()
		case <-t.C:
			queues = d.kicked()
			for q := range watched {
				if skip[q] > 0 {
					skip[q]--
					continue
				}
				queues = append(queues, q)
				polled[q] = true
			}
		}
		slices.Sort(queues)
		for _, q := range slices.Compact(queues) {
			watched[q] = true
			admitted, err := d.admitQueue(ctx, cfg, q, polled[q], ensured, watched)
			if err != nil && ctx.Err() == nil {
				cfg.Logger.Error("admission pass failed", "queue", q, "err", err)
			}
			if admitted > 0 || !polled[q] {
				backoff[q] = 0
			} else {
				backoff[q] = min(max(2*backoff[q], 1), maxBackoff)
			}
			skip[q] = backoff[q]
		}
	}
}

// tenantRetry is how soon a queue is looked at again after a pass left a
// tenant out because an admitter of another queue held its row.
const tenantRetry = 3 * time.Millisecond

// maxPollBackoff bounds how seldom a queue whose polls admit nothing is
// polled: the wait of a retry whose backoff ended, or of work released
// by a process that does not admit it.
const maxPollBackoff = 400 * time.Millisecond

// admitQueue runs passes over one queue until one admits nothing, and
// returns how many tasks they admitted.
func (d *Dispatcher) admitQueue(ctx context.Context, cfg AdmitConfig, q string, polled bool, ensured, watched map[string]bool) (int, error) {
	if polled {
		// A cheap look first: most polls find nothing ready.
		any, err := store.New(cfg.Pool).AnyWaiting(ctx, q)
		if err != nil {
			return 0, err
		}
		if !any {
			if !slices.Contains(cfg.Queues, q) {
				delete(watched, q)
			}
			return 0, nil
		}
	}
	if !ensured[q] {
		if err := store.New(cfg.Pool).EnsureQueue(ctx, q); err != nil {
			return 0, err
		}
		ensured[q] = true
	}
	total := 0
	for {
		res, err := d.AdmitOnce(ctx, cfg, q)
		total += res.Admitted
		if err != nil {
			return total, err
		}
		switch {
		case res.Busy:
			// Another admitter decides for q now and may have read before
			// our release committed: look again at the next poll.
			time.AfterFunc(cfg.PollInterval, func() { d.Kick(q) })
		case res.Skipped:
			// A tenant sat this pass out, its share kept free: come back
			// soon, when the admitter of its other queue is done with it.
			time.AfterFunc(tenantRetry, func() { d.Kick(q) })
		}
		if res.LinedUp > 0 {
			// Back when the first place given comes (pacing only: the
			// pass decides by the database's clock), and at once for
			// what the line-up leaves eligible now.
			d.kickAt(q, res.NextPlace, res.NextIn)
		}
		if res.Busy || res.Skipped || (res.Admitted == 0 && res.LinedUp == 0) {
			return total, nil
		}
	}
}

// Admission is what one pass did.
type Admission struct {
	// Busy: another admitter held the queue; the pass did nothing.
	Busy bool
	// Skipped: another admitter held the row of a waiting tenant with a
	// quota; the pass left it out and its share free.
	Skipped  bool
	Admitted int
	// LinedUp tasks were refused a token of their rate limits and given
	// their places in its line, the first at NextPlace, NextIn after the
	// pass's instant (both the database's; rates.go).
	LinedUp   int
	NextPlace time.Time
	NextIn    time.Duration
}

// tenantState is one waiting tenant during a pass.
type tenantState struct {
	id      uuid.UUID
	weight  int64
	held    int64            // slots held in this queue, with those given this pass
	heldRes resources.Vector // what its tasks holding them ask for
	share   float64          // its weighted dominant share (pool.share / weight)
	room    int64            // slots it may still get under its quotas
	target  int64            // what it would get this pass with tasks enough
	waiting []store.AdmissionCandidatesRow
	// quota is its quotas in resources (zero: none); heldAll what its
	// tasks in flight in every queue ask for, with those given this pass.
	quota, heldAll resources.Vector
}

// withinQuota reports whether a task of need keeps the tenant within its
// quotas in resources (each resource the quota names).
func (s *tenantState) withinQuota(need resources.Vector) bool {
	return s.heldAll.Add(need).Over(s.quota) == ""
}

func (s *tenantState) reshare(p *pool) { s.share = p.share(s.held, s.heldRes) / float64(s.weight) }

// need is what a candidate asks for.
func need(c store.AdmissionCandidatesRow) resources.Vector {
	return resources.FromColumns(c.ResCpu, c.ResMemory, c.ResGpu, c.ResCustom)
}

// AdmitOnce runs one admission pass for a queue (see the admission doc):
// one transaction.
func (d *Dispatcher) AdmitOnce(ctx context.Context, cfg AdmitConfig, queue string) (Admission, error) {
	if err := cfg.withDefaults(); err != nil {
		return Admission{}, err
	}
	var res Admission
	var waited []float64
	err := store.InRawTx(ctx, cfg.Pool, func(tx pgx.Tx) error {
		var err error
		res, waited, err = d.admit(ctx, tx, cfg, queue)
		return err
	})
	if err == nil && len(waited) > 0 && d.waited != nil {
		d.waited(queue, waited)
	}
	return res, err
}

// admit is one admission pass for a queue in tx: the tasks admitted, how
// long each waited (seconds), or why the pass admitted none (Busy,
// Skipped).
func (d *Dispatcher) admit(ctx context.Context, tx pgx.Tx, cfg AdmitConfig, queue string) (res Admission, waited []float64, err error) {
	q := store.New(tx)
	if _, err := q.LockQueue(ctx, queue); err != nil {
		if store.IsNotFound(err) {
			res.Busy = true
			return res, nil, nil
		}
		return res, nil, err
	}
	caps, err := q.QueueCapacities(ctx, queue)
	if err != nil {
		return res, nil, err
	}
	p := poolOf(caps)
	held, err := q.InFlightByTenant(ctx, queue)
	if err != nil {
		return res, nil, err
	}
	heldBy := make(map[uuid.UUID]int64, len(held))
	resBy := make(map[uuid.UUID]resources.Vector, len(held))
	var inFlight int64
	var inFlightRes resources.Vector
	for _, h := range held {
		inFlight += h.InFlight
		heldBy[h.TenantID] = h.InFlight
		resBy[h.TenantID] = resources.FromColumns(h.Cpu, h.Memory, h.Gpu, h.Custom)
		inFlightRes = inFlightRes.Add(resBy[h.TenantID])
	}
	free := room(p.slots, inFlight)
	free = min(free, admitBatch)
	if free <= 0 {
		return res, nil, nil
	}
	tenants, err := q.WaitingTenants(ctx, queue)
	if err != nil || len(tenants) == 0 {
		return res, nil, err
	}
	states, reserved, skipped, err := tenantStates(ctx, q, queue, tenants, heldBy, resBy, &p, free)
	res.Skipped = skipped
	free -= reserved
	if err != nil || len(states) == 0 || free <= 0 {
		return res, nil, err
	}
	c := &chooser{p: &p, queue: queue, inFlight: inFlightRes, free: free, rates: &rates{}}
	cands, err := c.read(ctx, q, cfg, states)
	if err != nil {
		return res, nil, err
	}
	chosen := c.chosen()
	var rows []store.AdmitTasksRow
	if len(chosen) > 0 {
		if rows, err = q.AdmitTasks(ctx, chosen); err != nil {
			return res, nil, err
		}
	}
	// The keys that refused a token line up their waiting tasks, once
	// this pass's admissions are marked (rates.go).
	res.LinedUp, res.NextPlace, err = c.rates.lineUp(ctx, q, queue)
	res.NextIn = res.NextPlace.Sub(c.rates.now)
	if err != nil || len(rows) == 0 {
		return res, nil, err
	}
	rank := make(map[uuid.UUID]int, len(chosen))
	for i, id := range chosen {
		rank[id] = i
	}
	// River works a queue's jobs in the order they were inserted: insert
	// them in the order choose gave the slots, not the order the update
	// returned them (its scan's, by task id: the oldest tenant's tasks
	// first, so that they always waited least in River and came back
	// for their next slot sooner than their weight's share).
	slices.SortFunc(rows, func(a, b store.AdmitTasksRow) int { return cmp.Compare(rank[a.ID], rank[b.ID]) })
	byCand := map[uuid.UUID]store.AdmissionCandidatesRow{}
	for _, c := range cands {
		byCand[c.ID] = c
	}
	ready := make([]Ready, len(rows))
	most := p.largest() // once for the pass, not a loop over the workers per task
	for i, r := range rows {
		k := byCand[r.ID]
		ready[i] = NextAttempt(r.ID, r.TenantID, queue, r.Priority, r.Attempt).WithNeed(need(k))
		// The gate holds room at once for a large task that waited
		// its reservation here (small ones need none: they fit as soon
		// as anything ends, and would make the gate first come, first
		// served).
		ready[i].Reserve = k.MayReserve && !p.undeclared && isLarge(need(k), most)
		waited = append(waited, r.WaitedSeconds)
	}
	if d.outbox {
		// In the state transaction: the marks and the rows commit
		// together, and Relay inserts the River jobs afterwards.
		err = insertOutbox(ctx, tx, ready)
	} else {
		err = insertJobs(ctx, d.river, tx, ready, false)
	}
	if err != nil {
		return res, nil, fmt.Errorf("insert River jobs: %w", err)
	}
	cfg.Failpoints.Hit(FailpointAdmitted)
	res.Admitted = len(rows)
	return res, waited, nil
}

// tenantStates reads the weights and quotas of the waiting tenants; for
// those with a quota across queues it locks their rows and counts their
// slots held in every queue. A tenant whose row another admitter holds is
// left out of this pass (skipped is then true), its share of free
// reserved. It then sets each tenant's target: what it would get of free
// if it had tasks enough.
func tenantStates(ctx context.Context, q *store.Queries, queue string, tenants []uuid.UUID, heldBy map[uuid.UUID]int64, resBy map[uuid.UUID]resources.Vector,
	p *pool, free int64) (states []*tenantState, reserved int64, skipped bool, err error) {
	limits, err := q.TenantLimits(ctx, store.TenantLimitsParams{Queue: queue, Ids: tenants})
	if err != nil {
		return nil, 0, false, err
	}
	var quota []uuid.UUID
	for _, l := range limits {
		if l.MaxConcurrency > 0 || len(l.MaxResources) > 0 {
			quota = append(quota, l.ID)
		}
	}
	total := map[uuid.UUID]int64{}
	totalRes := map[uuid.UUID]resources.Vector{}
	locked := map[uuid.UUID]bool{}
	if len(quota) > 0 {
		ids, err := q.LockTenants(ctx, quota)
		if err != nil {
			return nil, 0, false, err
		}
		for _, id := range ids {
			locked[id] = true
		}
		rows, err := q.TenantInFlight(ctx, ids)
		if err != nil {
			return nil, 0, false, err
		}
		for _, r := range rows {
			total[r.TenantID] = r.InFlight
			totalRes[r.TenantID] = resources.FromColumns(r.Cpu, r.Memory, r.Gpu, r.Custom)
		}
	}
	// A tenant whose row another admitter holds keeps its share of this
	// pass's slots (reserved, left free until a later pass): giving it to
	// the others would cut its weight whenever it is busy in another queue.
	isSkipped := map[*tenantState]bool{}
	states = make([]*tenantState, 0, len(limits))
	for _, l := range limits {
		s := &tenantState{id: l.ID, weight: int64(max(l.Weight, 1)), held: heldBy[l.ID], heldRes: resBy[l.ID], room: admitBatch}
		s.reshare(p)
		if l.MaxConcurrency > 0 || len(l.MaxResources) > 0 {
			if !locked[l.ID] {
				isSkipped[s] = true
			} else if l.MaxConcurrency > 0 {
				s.room = min(s.room, int64(l.MaxConcurrency)-total[l.ID])
			}
		}
		if len(l.MaxResources) > 0 {
			_ = json.Unmarshal(l.MaxResources, &s.quota) // written by access.SetQuota
			s.heldAll = totalRes[l.ID]
		}
		if l.QueueMax > 0 {
			s.room = min(s.room, int64(l.QueueMax)-s.held)
		}
		if s.room > 0 {
			states = append(states, s)
		}
	}
	setTargets(states, free, p)
	out := states[:0]
	for _, s := range states {
		if isSkipped[s] {
			reserved += s.target
		} else {
			out = append(out, s)
		}
	}
	// Those the fill gives slots to first, by share (chooser.read).
	slices.SortFunc(out, func(a, b *tenantState) int {
		if (a.target > 0) != (b.target > 0) {
			if a.target > 0 {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.share, b.share), cmp.Compare(b.weight, a.weight), compareIDs(a.id, b.id))
	})
	return out, reserved, len(isSkipped) > 0, nil
}

// setTargets water-fills free slots over the tenants as choose would if
// each had tasks enough: how many of each tenant's candidates to read.
// (By their slots: what their tasks will ask for is not read yet.)
func setTargets(states []*tenantState, free int64, p *pool) {
	h := &byShare{}
	for _, s := range states {
		heap.Push(h, s)
	}
	for ; free > 0 && h.Len() > 0; free-- {
		s := (*h)[0]
		s.target++
		s.held++
		s.reshare(p)
		if s.target >= s.room {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
	}
	for _, s := range states {
		s.held -= s.target // as it was: the fill counted its target in
		s.reshare(p)
	}
}

// maxReadRounds bounds the rounds of candidates one pass reads.
const maxReadRounds = 8

// read reads the candidates of the tenants (in the order tenantStates
// gives them) and chooses among them, a round at a time: first those the
// water-fill gives slots to, as many of each as twice its target and a
// few more (one that does not fit now is passed over for the next); while
// slots stay free (their candidates do not fit now, or were fewer), the
// next tenants by share, up to maxReadRounds. So a tenant whose waiting
// tasks cannot go now (they wait for room, or for a worker) does not keep
// the others from the slots it would have had. It returns what it read.
func (c *chooser) read(ctx context.Context, q *store.Queries, cfg AdmitConfig, states []*tenantState) ([]store.AdmissionCandidatesRow, error) {
	most := c.p.largest()
	var all []store.AdmissionCandidatesRow
	for next, round := 0, 0; c.free > 0 && next < len(states) && round < maxReadRounds; round++ {
		n := 0
		if round == 0 {
			n = slices.IndexFunc(states, func(s *tenantState) bool { return s.target == 0 })
			if n < 0 {
				n = len(states)
			}
		}
		if n == 0 { // as many as the slots left, each as if its target were one
			n = min(len(states)-next, max(int(c.free), 32))
		}
		batch := states[next : next+n]
		next += n
		ids := make([]uuid.UUID, len(batch))
		limits := make([]int32, len(batch))
		byID := make(map[uuid.UUID]*tenantState, len(batch))
		for i, s := range batch {
			ids[i], limits[i] = s.id, int32(min(2*max(s.target, 1)+8, admitBatch))
			byID[s.id] = s
		}
		cands, err := q.AdmissionCandidates(ctx, store.AdmissionCandidatesParams{
			Tenants: ids, Limits: limits, Queue: c.queue, AgingSeconds: cfg.Aging.Seconds(), ReserveSeconds: cfg.ReserveAfter.Seconds(),
			MostCpu: most.CPU, MostMemory: most.Memory, MostGpu: most.GPU})
		if err != nil {
			return nil, err
		}
		if err := c.rates.load(ctx, q, cands); err != nil {
			return nil, err
		}
		for _, k := range cands {
			s := byID[k.TenantID]
			s.waiting = append(s.waiting, k)
		}
		all = append(all, cands...)
		picked := len(c.picks)
		c.take(batch)
		// A later round whose tenants had candidates and took none: the
		// queue is full for what waits. (The first round's may be only
		// tenants whose tasks cannot go now, and a round that read no
		// candidate says nothing of the room.)
		if round > 0 && len(cands) > 0 && len(c.picks) == picked {
			break
		}
	}
	return all, nil
}

// chooser is one pass's choice: what the queue's tasks in flight ask for
// (with the room a reservation holds back, once one is made), the slots
// still free, and the slots given so far.
type chooser struct {
	p         *pool
	queue     string
	inFlight  resources.Vector
	free      int64
	reserving bool
	picks     []pick
	rates     *rates // the rate limits' buckets of the candidates read
}

type pick struct {
	id    uuid.UUID
	share float64 // the tenant's weighted share with this one
}

// choose gives up to free slots of tenants whose candidates are read (see
// chooser.take), and returns the tasks chosen in the order River is to
// work them.
func choose(states []*tenantState, free int64, p *pool, inFlight resources.Vector, queue string) []uuid.UUID {
	c := &chooser{p: p, queue: queue, inFlight: inFlight, free: free, rates: &rates{}}
	c.take(states)
	return c.chosen()
}

// take gives the free slots, one at a time, to the tenant with the
// smallest weighted dominant share that still has a task waiting that
// fits (some live worker could run it, and the queue's tasks in flight
// have room for it: pool) and room under its quotas. Each tenant's tasks
// go by aged priority: aged first, then by priority, then oldest first;
// one that does not fit is passed over for the next (work-conserving: a
// large task does not hold back a smaller one that fits), and waits for
// a later pass.
//
// Until it has waited ReserveAfter: from then on, when its tenant's turn
// comes and the queue lacks the room for it, it holds back that room and
// a slot (the pass's one reservation, as an HPC scheduler reserves for
// the head of its queue and backfills around it): later candidates go
// only within what is left, so the room it needs gathers as the tasks in
// flight end, and a later pass admits it. Nothing of it is stored; every
// pass decides again.
func (c *chooser) take(states []*tenantState) {
	p := c.p
	h := &byShare{}
	for _, s := range states {
		s.reshare(p)
		slices.SortFunc(s.waiting, func(a, b store.AdmissionCandidatesRow) int {
			return cmp.Or(cmp.Compare(rank(a), rank(b)), a.ReadyAt.Compare(b.ReadyAt), compareIDs(a.ID, b.ID))
		})
		if len(s.waiting) > 0 {
			heap.Push(h, s)
		}
	}
	for c.free > 0 && h.Len() > 0 {
		s := (*h)[0]
		i := -1
		for j, k := range s.waiting {
			if !c.rates.token(k) { // it waits for its rate limit's token
				continue
			}
			v := need(k)
			if ok, _ := p.fits(v, c.queue); !ok || !s.withinQuota(v) {
				continue
			}
			if p.room(c.inFlight, v) {
				i = j
				break
			}
			if k.MayReserve && !c.reserving {
				c.reserving, c.inFlight = true, c.inFlight.Add(v)
				c.free--
			}
		}
		if i < 0 { // nothing of its fits now: it waits for a later pass
			heap.Pop(h)
			continue
		}
		if c.free <= 0 { // the reservation took the last slot
			break
		}
		v := need(s.waiting[i])
		c.rates.spend(s.waiting[i])
		s.held++
		s.heldRes = s.heldRes.Add(v)
		s.heldAll = s.heldAll.Add(v)
		c.inFlight = c.inFlight.Add(v)
		s.reshare(p)
		c.picks = append(c.picks, pick{s.waiting[i].ID, s.share})
		s.waiting = slices.Delete(s.waiting, i, i+1)
		s.room--
		c.free--
		if len(s.waiting) == 0 || s.room <= 0 {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
	}
}

// chosen is the tasks chosen, in the order River is to work them (their
// insert order): by the share each slot brings its tenant to, smallest
// first (a weighted fair queue's order), so that no tenant's tasks always
// wait least in River and come back for their next slot sooner than their
// weight's share. Within a tenant, the order take gave them.
func (c *chooser) chosen() []uuid.UUID {
	slices.SortStableFunc(c.picks, func(a, b pick) int { return cmp.Compare(a.share, b.share) })
	out := make([]uuid.UUID, len(c.picks))
	for i, p := range c.picks {
		out[i] = p.id
	}
	return out
}

// rank orders a tenant's waiting tasks: aged ones before every priority.
func rank(c store.AdmissionCandidatesRow) int32 {
	if c.Aged {
		return 0
	}
	return c.Priority
}

// byShare is a min-heap of tenants by weighted dominant share (ties: the
// heavier first, then by id, so that passes are reproducible).
type byShare []*tenantState

func (h byShare) Len() int { return len(h) }
func (h byShare) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.share != b.share {
		return a.share < b.share
	}
	if a.weight != b.weight {
		return a.weight > b.weight
	}
	return compareIDs(a.id, b.id) < 0
}

// compareIDs orders uuids as their text does, without formatting them.
func compareIDs(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }
func (h byShare) Swap(i, j int)     { h[i], h[j] = h[j], h[i] }
func (h *byShare) Push(x any)       { *h = append(*h, x.(*tenantState)) }
func (h *byShare) Pop() any {
	old := *h
	s := old[len(old)-1]
	*h = old[:len(old)-1]
	return s
}

// Direct decides, in the transaction that releases them and before it
// writes them, which of the ready tasks (first attempts, none a retry, a
// redelivery or a task with a rate limit) skip the wait for an admission
// pass, and sets their Admitted: the caller writes them admitted, and
// Release hands them to
// River in that transaction, as if an admitter had. A tenant's tasks in a
// queue skip it only when no task waits in that queue (so nothing is
// passed over: not another tenant's turn, not an older task of its own),
// the tenant has no quota that applies there (quotas are the admitters'
// alone), and the queue has free slots for them; then up to that many go,
// most urgent first (tasks of several tenants go only if all fit: else
// the admitters share the slots by weight). Concurrent releases read the
// same free slots, so a queue may briefly hold more than its bound; it
// drains by the next passes.
// This is the uncontended path (a lone tenant, the steady load): one
// read per tenant and queue, and no second write of each task.
func (d *Dispatcher) Direct(ctx context.Context, tx pgx.Tx, ready []Ready) error {
	// By queue, then tenant (in id order: the same every time).
	byQueue := map[string]map[uuid.UUID][]int{}
	for i, r := range ready {
		if r.Redelivers != 0 || !r.NotBefore.IsZero() || r.Limited {
			continue
		}
		if byQueue[r.Queue] == nil {
			byQueue[r.Queue] = map[uuid.UUID][]int{}
		}
		byQueue[r.Queue][r.Tenant] = append(byQueue[r.Queue][r.Tenant], i)
	}
	q := store.New(tx)
	for _, queue := range slices.Sorted(maps.Keys(byQueue)) {
		groups := byQueue[queue]
		tenants := slices.SortedFunc(maps.Keys(groups), compareIDs)
		free, p, inFlight, err := directRoom(ctx, q, queue, tenants)
		if err != nil {
			return fmt.Errorf("dispatch: direct admission: %w", err)
		}
		total := 0
		for _, g := range groups {
			total += len(g)
		}
		// Several tenants that do not all fit: the admitters share the
		// slots between them by weight. One that does not fit: its most
		// urgent go now, the rest wait.
		if free <= 0 || (len(tenants) > 1 && total > free) {
			continue
		}
		if !p.undeclared { // the sizes matter here: read those not known
			var idx []int
			for _, g := range groups {
				idx = append(idx, g...)
			}
			if err := sizeReady(ctx, q, ready, idx); err != nil {
				return fmt.Errorf("dispatch: direct admission: %w", err)
			}
		}
		for _, tenant := range tenants {
			idx := groups[tenant]
			slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(ready[a].Priority, ready[b].Priority) })
			for _, i := range idx[:min(free, len(idx))] {
				// A task whose size is not known here, or that does not
				// fit, waits for a pass, which reads it (unless the
				// queue's workers bound no resources).
				r := ready[i]
				if ok, _ := p.fits(r.Need, queue); !ok || !p.room(inFlight, r.Need) || !r.Sized && !p.undeclared {
					continue
				}
				inFlight = inFlight.Add(r.Need)
				ready[i].Admitted = true
			}
		}
	}
	return nil
}

// sizeReady reads what the ready tasks at idx whose callers did not read
// it ask for (those whose rows are written: a run's new tasks come sized).
func sizeReady(ctx context.Context, q *store.Queries, ready []Ready, idx []int) error {
	var ids []uuid.UUID
	at := map[uuid.UUID]int{}
	for _, i := range idx {
		if !ready[i].Sized {
			ids = append(ids, ready[i].TaskID)
			at[ready[i].TaskID] = i
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := q.TaskSizes(ctx, ids)
	for _, r := range rows {
		ready[at[r.ID]] = ready[at[r.ID]].WithNeed(resources.FromColumns(r.ResCpu, r.ResMemory, r.ResGpu, r.ResCustom))
	}
	return err
}

// directRoom is how many tasks of these tenants may skip the wait in a
// queue: its free slots, or none when a task waits there or one of the
// tenants has a quota that applies there; with the queue's pool and what
// its tasks in flight ask for.
func directRoom(ctx context.Context, q *store.Queries, queue string, tenants []uuid.UUID) (int, pool, resources.Vector, error) {
	load, err := q.QueueLoad(ctx, queue)
	if err != nil || load.Waiting {
		return 0, pool{}, resources.Vector{}, err
	}
	limits, err := q.TenantLimits(ctx, store.TenantLimitsParams{Queue: queue, Ids: tenants})
	if err != nil || len(limits) != len(tenants) {
		return 0, pool{}, resources.Vector{}, err
	}
	for _, l := range limits {
		if l.MaxConcurrency > 0 || l.QueueMax > 0 || len(l.MaxResources) > 0 {
			return 0, pool{}, resources.Vector{}, nil
		}
	}
	caps, err := q.QueueCapacities(ctx, queue)
	p := poolOf(caps)
	return int(room(p.slots, load.InFlight)), p, resources.FromColumns(load.Cpu, load.Memory, load.Gpu, load.Custom), err
}

// room is how many more tasks a queue of slots worker slots takes while it
// holds inFlight (InFlightPerSlot a slot); negative when it holds more
// (its workers went away).
func room(slots, inFlight int64) int64 { return slots*InFlightPerSlot - inFlight }

// WaitReason says why a task of a tenant waits for admission in a queue,
// as the API shows it: "no worker serves queue etl", "tenant quota 50/50",
// "tenant quota in queue etl 10/10", "queue etl full 400/400", or "waiting
// for its turn" (other tenants' or this tenant's earlier work goes first).
func WaitReason(ctx context.Context, q *store.Queries, tenant uuid.UUID, queue string, need resources.Vector) (string, error) {
	caps, err := q.QueueCapacities(ctx, queue)
	if err != nil {
		return "", err
	}
	p := poolOf(caps)
	slots := p.slots
	if slots == 0 {
		return fmt.Sprintf("no worker serves queue %s", queue), nil
	}
	if ok, why := p.fits(need, queue); !ok {
		return why, nil
	}
	limits, err := q.TenantLimits(ctx, store.TenantLimitsParams{Queue: queue, Ids: []uuid.UUID{tenant}})
	if err != nil || len(limits) == 0 {
		return "", err
	}
	if l := limits[0]; l.MaxConcurrency > 0 || len(l.MaxResources) > 0 {
		total, err := q.TenantInFlight(ctx, []uuid.UUID{tenant})
		if err != nil {
			return "", err
		}
		if n := sumInFlight(total); l.MaxConcurrency > 0 && n >= int64(l.MaxConcurrency) {
			return fmt.Sprintf("tenant quota %d/%d", n, l.MaxConcurrency), nil
		}
		s := tenantState{}
		_ = json.Unmarshal(l.MaxResources, &s.quota) // written by access.SetQuota
		for _, r := range total {
			s.heldAll = s.heldAll.Add(resources.FromColumns(r.Cpu, r.Memory, r.Gpu, r.Custom))
		}
		if name := need.Over(s.quota); name != "" { // alone: a quota lowered below a live job's step
			return fmt.Sprintf("needs %s %s, more than the tenant's quota of %s: it waits until the quota is raised (or the step asks less)",
				name, resources.Format(name, need.Get(name)), resources.Format(name, s.quota.Get(name))), nil
		}
		if name := s.heldAll.Add(need).Over(s.quota); name != "" {
			return fmt.Sprintf("tenant quota %s %s/%s (needs %s)", name, resources.Format(name, s.heldAll.Get(name)),
				resources.Format(name, s.quota.Get(name)), resources.Format(name, need.Get(name))), nil
		}
	}
	held, err := q.InFlightByTenant(ctx, queue)
	if err != nil {
		return "", err
	}
	inQueue, mine := int64(0), int64(0)
	for _, h := range held {
		inQueue += h.InFlight
		if h.TenantID == tenant {
			mine = h.InFlight
		}
	}
	switch {
	case limits[0].QueueMax > 0 && mine >= int64(limits[0].QueueMax):
		return fmt.Sprintf("tenant quota in queue %s %d/%d", queue, mine, limits[0].QueueMax), nil
	case room(slots, inQueue) <= 0:
		return fmt.Sprintf("queue %s full %d/%d", queue, inQueue, room(slots, 0)), nil
	}
	load, err := q.QueueLoad(ctx, queue)
	if err != nil {
		return "", err
	}
	if inFlight := resources.FromColumns(load.Cpu, load.Memory, load.Gpu, load.Custom); !p.room(inFlight, need) {
		return fmt.Sprintf("queue %s's workers busy: needs %s; in flight %s", queue, need, inFlight), nil
	}
	return "waiting for its turn", nil
}

func sumInFlight(rows []store.TenantInFlightRow) int64 {
	var n int64
	for _, r := range rows {
		n += r.InFlight
	}
	return n
}
