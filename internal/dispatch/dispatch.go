// Package dispatch hands released tasks to River through admission.
//
// # Release and admission
//
// Release, called in the transaction that releases tasks (a run's
// creation, a parent's success, a retry, a replay), inserts nothing into
// River: the released task rows wait in the tasks table (status queued
// or retrying, admitted_at NULL, ready_at when the wait began or a
// retry's backoff ends), and once that transaction commits the process's
// admitter is woken for their queues. The admitters decide what goes to
// River; see admit.go for how they choose and what their transaction
// locks. A redelivery (the replacement of a River job that a dead worker
// fetched and never started) is of an admitted task and goes to River at
// once.
//
// When River's tables live in another database than Orrery's state (River
// does not run on CockroachDB), for every queue or for some (QueueDBs
// places each queue's), an admission (and a redelivery) writes an outbox
// row per River job in its state transaction, so that the marks and the
// rows commit together, and Relay moves outbox rows to River afterwards:
// it inserts the River jobs, each into its queue's database, then deletes
// the rows. A crash between the two replays the insert, which River's
// unique key (task, attempt, redelivery) makes harmless, and the task's
// fencing token would reject a second attempt anyway.
package dispatch

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
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/store"
)

// TaskArgs is the River job for one attempt of one task. Attempt is the
// number of the attempt it starts; with the task id it is the job's unique
// key, so a replayed insert is harmless. Redelivers is set on a job that
// replaces one a dead worker fetched and never started (that job's River
// id): a key of its own, since the stranded job still holds the first.
type TaskArgs struct {
	TaskID     uuid.UUID `json:"task_id" river:"unique"`
	Attempt    int       `json:"attempt" river:"unique"`
	Redelivers int64     `json:"redelivers,omitempty" river:"unique"`
	// Need is what the task asks for, when its admission knew it (nil:
	// the worker reads it); not part of the unique key.
	Need *resources.Vector `json:"need,omitempty"`
	// Reserve: the task waited AdmitConfig.ReserveAfter for admission, so
	// the worker's gate holds the room it needs at once rather than after
	// a wait of its own; not part of the unique key.
	Reserve bool `json:"reserve,omitempty"`
}

// Kind is the River job kind of TaskArgs.
func (TaskArgs) Kind() string { return "orrery_task" }

// Ready is a task to hand to a worker pool.
type Ready struct {
	TaskID   uuid.UUID
	Tenant   uuid.UUID
	Queue    string
	Priority int // River priority, 1 (critical) to 4 (low)
	Attempt  int // the attempt this starts
	// NotBefore delays the attempt (retry backoff): an instant computed from
	// the database's clock, never this process's. Zero: now.
	NotBefore time.Time
	// Redelivers is the River job this one replaces (see TaskArgs).
	Redelivers int64
	// Admitted: Direct let it skip the wait (its row was written
	// admitted); Release hands it to River at once.
	Admitted bool
	// Need is what the task asks for, when Sized (the caller read it):
	// Direct lets a task skip the wait only when it knows its size, or
	// when its queue's workers bound no resources.
	Need  resources.Vector
	Sized bool
	// Reserve: it waited ReserveAfter for admission (TaskArgs.Reserve).
	Reserve bool
	// Limited: its step has a rate limit, whose tokens an admission pass
	// spends; Direct never lets it skip the wait.
	Limited bool
}

// WithNeed is r with what its task asks for.
func (r Ready) WithNeed(v resources.Vector) Ready {
	r.Need, r.Sized = v, true
	return r
}

// NextAttempt is the release of a task that has made `made` attempts: it
// starts attempt made+1. Every release of a task is built here.
func NextAttempt(task, tenant uuid.UUID, queue string, priority, made int32) Ready {
	return Ready{TaskID: task, Tenant: tenant, Queue: queue, Priority: int(priority), Attempt: int(made) + 1}
}

// QueueDBs says which PostgreSQL database holds each queue's River
// tables: ByQueue's for the queues it names, Default's for the others.
type QueueDBs struct {
	Default *pgxpool.Pool
	ByQueue map[string]*pgxpool.Pool
}

// For is the database of queue's River tables (a bound queue's is its
// queue's; a remote step's, HandoffQueue's, is always Default's).
func (q QueueDBs) For(queue string) *pgxpool.Pool {
	if IsRemote(queue) || queue == HandoffQueue {
		return q.Default
	}
	if p, ok := q.ByQueue[BaseQueue(queue)]; ok {
		return p
	}
	return q.Default
}

// Pools are the distinct queue databases, Default first.
func (q QueueDBs) Pools() []*pgxpool.Pool {
	out := []*pgxpool.Pool{q.Default}
	for _, name := range slices.Sorted(maps.Keys(q.ByQueue)) {
		if p := q.ByQueue[name]; !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// poolsOf are the distinct databases of queues' River tables; all of them
// when no queue is given.
func (q QueueDBs) poolsOf(queues []string) []*pgxpool.Pool {
	if len(queues) == 0 {
		return q.Pools()
	}
	var out []*pgxpool.Pool
	for _, name := range queues {
		if p := q.For(name); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// Dispatcher inserts River jobs for released tasks.
type Dispatcher struct {
	river  *river.Client[pgx.Tx]
	outbox bool
	// dbs, clients and pending (one each per queue database: what its
	// relay reads of the outbox) are the relay's, in outbox mode.
	dbs     QueueDBs
	clients map[*pgxpool.Pool]*river.Client[pgx.Tx]
	pending map[*pgxpool.Pool]store.PendingOutboxParams
	wake    wake
	// waited observes how long admitted tasks waited (ObserveAdmissions).
	waited func(queue string, seconds []float64)
}

// ObserveAdmissions has f told, after each commit that admitted tasks
// (a pass of this process's admitter, or a release that admitted them
// directly, with 0 s), how long they waited, per queue. Call it before
// the dispatcher is used.
func (d *Dispatcher) ObserveAdmissions(f func(queue string, seconds []float64)) { d.waited = f }

// riverNotifyCooldown is how often River's own insert notification may go
// out from one client for one queue. River sends it at most once per
// queue per the client's FetchCooldown, and only on the leading edge: a
// second transaction inserting into the queue within that window sent
// none, and its jobs waited for the workers' next poll. In the steady
// benchmark (two firing groups inserting at once) a tenth of the runs
// waited for it, the whole tail of the start lag. So every transaction
// that inserts River jobs sends the notification itself (notifyInserted),
// and River's own is all but turned off; when both go out in one
// transaction PostgreSQL delivers one. The workers' River clients
// debounce the wake-ups (their FetchCooldown). The cost: PostgreSQL
// serializes the commits of notifying transactions (a cluster-wide lock
// from the notification's queueing to the end of the commit). Those that
// insert River jobs are batches (a firing, an admission pass, a batch of
// reports), tens to a few hundred a second in the benchmarks; should that
// lock show, one notification per queue sent after commit by a
// per-process coalescer would replace these.
const riverNotifyCooldown = time.Hour

// riverConfig is the River client configuration of a dispatcher: it
// inserts, it never works jobs.
func riverConfig() *river.Config {
	return &river.Config{FetchCooldown: riverNotifyCooldown, FetchPollInterval: riverNotifyCooldown}
}

// insertJobs inserts the River jobs of ready tasks with c in tx and wakes
// the workers of their queues once tx commits.
func insertJobs(ctx context.Context, c *river.Client[pgx.Tx], tx pgx.Tx, ready []Ready, unique bool) error {
	if _, err := c.InsertManyTx(ctx, tx, riverParams(ready, unique)); err != nil {
		return err
	}
	return notifyInserted(ctx, tx, ready)
}

// notifyInserted sends, in tx, River's insert notification for each queue
// of ready that has a job to work now (a retry after its backoff is made
// available by River's scheduler, which notifies then). The channel and
// payload are River's own (its client sends them so): a River upgrade
// that changes them fails TestEveryInsertWakesTheWorkers.
func notifyInserted(ctx context.Context, tx pgx.Tx, ready []Ready) error {
	var payloads []string
	for _, r := range ready {
		if !r.NotBefore.IsZero() {
			continue
		}
		p := fmt.Sprintf("{\"queue\": %q}", RiverQueue(r.Queue))
		if !slices.Contains(payloads, p) {
			payloads = append(payloads, p)
		}
	}
	if len(payloads) == 0 {
		return nil
	}
	if err := store.New(tx).NotifyRiverInsert(ctx, payloads); err != nil {
		return fmt.Errorf("notify workers: %w", err)
	}
	return nil
}

// New returns a Dispatcher for River tables in the state database.
func New() (*Dispatcher, error) {
	c, err := river.NewClient(riverpgxv5.New(nil), riverConfig())
	if err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	return &Dispatcher{river: c, wake: newWake()}, nil
}

// NewOutbox returns a Dispatcher for River tables in queue databases other
// than the state's (some queues' at least): Release records, Relay inserts
// each queue's jobs into its database.
func NewOutbox(dbs QueueDBs) (*Dispatcher, error) {
	if dbs.Default == nil {
		return nil, errors.New("dispatch: QueueDBs.Default is required")
	}
	d := &Dispatcher{outbox: true, dbs: dbs, clients: map[*pgxpool.Pool]*river.Client[pgx.Tx]{},
		pending: map[*pgxpool.Pool]store.PendingOutboxParams{}, wake: newWake()}
	for _, p := range dbs.Pools() {
		c, err := river.NewClient(riverpgxv5.New(p), riverConfig())
		if err != nil {
			return nil, fmt.Errorf("dispatch: %w", err)
		}
		d.clients[p] = c
		d.pending[p] = d.outboxOf(p)
	}
	d.river = d.clients[dbs.Default]
	return d, nil
}

// ForQueues is New when every queue's River tables are in the state
// database, else NewOutbox (every queue then goes through the outbox).
func ForQueues(state *pgxpool.Pool, dbs QueueDBs) (*Dispatcher, error) {
	if dbs.Default == nil {
		dbs.Default = state
	}
	if slices.Equal(dbs.Pools(), []*pgxpool.Pool{state}) {
		return New()
	}
	return NewOutbox(dbs)
}

// Release records ready tasks for admission in tx. The callers have
// already written the tasks' status and ready_at (and admitted_at for
// those Direct admitted); Release starts the wait of retries at the end of
// their backoff, hands redeliveries and directly admitted tasks to River,
// and wakes the admitter of each queue the others wait in once tx
// commits.
func (d *Dispatcher) Release(ctx context.Context, tx pgx.Tx, ready []Ready) error {
	if len(ready) == 0 {
		return nil
	}
	var again []Ready
	var retry store.SetReadyAtParams
	queues := map[string]bool{}
	for _, r := range ready {
		if r.Redelivers != 0 || r.Admitted {
			again = append(again, r)
			continue
		}
		queues[r.Queue] = true
		if !r.NotBefore.IsZero() {
			retry.Ids = append(retry.Ids, r.TaskID)
			retry.Ats = append(retry.Ats, r.NotBefore)
		}
	}
	if len(retry.Ids) > 0 {
		if err := store.New(tx).SetReadyAt(ctx, retry); err != nil {
			return fmt.Errorf("dispatch: retry backoff: %w", err)
		}
	}
	if len(queues) > 0 {
		store.OnCommit(tx, func() {
			for q := range queues {
				d.Kick(q)
			}
		})
	}
	if d.waited != nil {
		direct := map[string][]float64{}
		for _, r := range again {
			if r.Admitted {
				direct[r.Queue] = append(direct[r.Queue], 0)
			}
		}
		if len(direct) > 0 {
			store.OnCommit(tx, func() {
				for q, w := range direct {
					d.waited(q, w)
				}
			})
		}
	}
	if len(again) == 0 {
		return nil
	}
	if d.outbox {
		return insertOutbox(ctx, tx, again)
	}
	if err := insertJobs(ctx, d.river, tx, again, false); err != nil {
		return fmt.Errorf("dispatch: insert River jobs: %w", err)
	}
	return nil
}

// insertOutbox records River jobs to insert in the queue database once tx
// commits (see Relay).
func insertOutbox(ctx context.Context, tx pgx.Tx, ready []Ready) error {
	p := store.InsertOutboxParams{}
	for _, r := range ready {
		p.Ids = append(p.Ids, uuid.Must(uuid.NewV7()))
		p.TaskIds = append(p.TaskIds, r.TaskID)
		p.TenantIds = append(p.TenantIds, r.Tenant)
		p.Queues = append(p.Queues, r.Queue)
		p.Priorities = append(p.Priorities, int32(r.Priority))
		p.Attempts = append(p.Attempts, int32(r.Attempt))
		p.NotBefores = append(p.NotBefores, r.NotBefore)
		p.Redelivers = append(p.Redelivers, r.Redelivers)
		need := ""
		if r.Sized {
			b, _ := json.Marshal(r.Need)
			need = string(b)
		}
		p.Needs = append(p.Needs, need)
		p.Reserves = append(p.Reserves, r.Reserve)
	}
	if err := store.New(tx).InsertOutbox(ctx, p); err != nil {
		return fmt.Errorf("dispatch: outbox: %w", err)
	}
	return nil
}

// riverParams are the River inserts for ready tasks. unique asks River to
// drop a job whose (task, attempt) it already has: the relay needs that,
// since it may insert an outbox row again after a crash. An insert in the
// state transaction cannot be repeated, so it goes without: River's unique
// key costs a hash, an index entry per insert and per state change, and
// made River's share of the insert four times its bare cost.
func riverParams(ready []Ready, unique bool) []river.InsertManyParams {
	params := make([]river.InsertManyParams, len(ready))
	for i, r := range ready {
		opts := &river.InsertOpts{Queue: RiverQueue(r.Queue), Priority: r.Priority, MaxAttempts: 25}
		if unique {
			opts.UniqueOpts = river.UniqueOpts{ByArgs: true}
		}
		if !r.NotBefore.IsZero() {
			opts.ScheduledAt = r.NotBefore
		}
		args := TaskArgs{TaskID: r.TaskID, Attempt: r.Attempt, Redelivers: r.Redelivers, Reserve: r.Reserve}
		if r.Sized {
			args.Need = &r.Need
		}
		params[i] = river.InsertManyParams{Args: args, InsertOpts: opts}
	}
	return params
}

// RelayBatch is how many outbox rows one relay transaction moves.
const RelayBatch = 500

// relayTimeout bounds one relay transaction.
const relayTimeout = 10 * time.Second

// Relay moves outbox rows to River until ctx ends (outbox mode only; it
// returns at once otherwise). Several nodes may relay at once: each takes
// rows the others have not locked. Each queue database is relayed on its
// own, so that one that is down holds back only its own queues.
func (d *Dispatcher) Relay(ctx context.Context, state *pgxpool.Pool, every time.Duration, log *slog.Logger) error {
	if !d.outbox {
		return nil
	}
	pools := d.dbs.Pools()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, p := range pools {
			for {
				// A queue database that hangs holds back the others for one
				// batch's timeout at most.
				bctx, cancel := context.WithTimeout(ctx, relayTimeout)
				n, err := d.relayOnce(bctx, state, p)
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						log.Error("relay released tasks to River", "queue_db", p.Config().ConnConfig.Database, "err", err)
					}
					break
				}
				if n < RelayBatch {
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// outboxOf is what PendingOutbox selects for the rows of queue database p:
// the queues placed there, or for the default one every queue not placed
// elsewhere.
func (d *Dispatcher) outboxOf(p *pgxpool.Pool) store.PendingOutboxParams {
	params := store.PendingOutboxParams{Others: p == d.dbs.Default, Batch: RelayBatch, Queues: []string{}}
	for _, name := range slices.Sorted(maps.Keys(d.dbs.ByQueue)) {
		if placed := d.dbs.ByQueue[name]; (placed == p) != params.Others {
			params.Queues = append(params.Queues, name)
		}
	}
	return params
}

// relayOnce moves one batch of queue database p's rows: River insert
// (queue database), then delete (state database), inside the state
// transaction that locked the rows.
func (d *Dispatcher) relayOnce(ctx context.Context, state, p *pgxpool.Pool) (int, error) {
	var n int
	err := store.InRawTx(ctx, state, func(tx pgx.Tx) error {
		q := store.New(tx)
		rows, err := q.PendingOutbox(ctx, d.pending[p])
		if err != nil || len(rows) == 0 {
			n = 0
			return err
		}
		ready := make([]Ready, 0, len(rows))
		ids := make([]uuid.UUID, len(rows))
		type key struct {
			task                uuid.UUID
			attempt, redelivers int64
		}
		seen := make(map[key]bool, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
			// One insert per unique key: River's insert of a batch that holds
			// a key twice fails whole (ON CONFLICT cannot touch a row twice),
			// and every relay would then retry the same batch.
			k := key{r.TaskID, int64(r.Attempt), r.Redelivers}
			if seen[k] {
				continue
			}
			seen[k] = true
			rd := NextAttempt(r.TaskID, r.TenantID, r.Queue, r.Priority, r.Attempt-1) // the row holds the attempt it starts
			rd.Redelivers, rd.Reserve = r.Redelivers, r.Reserve
			if r.NotBefore != nil {
				rd.NotBefore = *r.NotBefore
			}
			var need resources.Vector
			if len(r.Need) > 0 && json.Unmarshal(r.Need, &need) == nil {
				rd = rd.WithNeed(need)
			}
			ready = append(ready, rd)
		}
		// The queue database's transaction commits inside the state's: a
		// crash between the two leaves rows River already has, inserted
		// again (and dropped by River's unique key) by the next relay.
		if err := pgx.BeginFunc(ctx, p, func(qtx pgx.Tx) error {
			return insertJobs(ctx, d.clients[p], qtx, ready, true)
		}); err != nil {
			return fmt.Errorf("insert River jobs: %w", err)
		}
		n = len(rows)
		return q.DeleteOutbox(ctx, ids)
	})
	return n, err
}
