package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// Remote attempts (docs/remote-workers.md): a gateway offers the attempt
// its River job carries; a remote worker's claim takes offers and starts
// their attempts under leases of their own; its heartbeats renew them;
// its reports end them as a local worker's do.

// RemoteWorker is a remote worker as a claim, a heartbeat or a report
// names it: its row in workers, its tenant, and what it serves.
type RemoteWorker struct {
	ID     uuid.UUID
	Name   string
	Tenant uuid.UUID
	// Key is the API key it claims with: the workers of one key are
	// bounded (MaxWorkersPerKey, MaxSlotsPerKey).
	Key uuid.UUID
	// Queues maps each step queue it serves to its slots there.
	Queues map[string]int
	Types  []string
	// Namespaces narrows its claims to these namespaces; none: any.
	Namespaces []string
	// Capacity is what it has for the attempts it runs at once; nil when
	// it declares none (its claims are bounded by their count only).
	Capacity *resources.Vector
}

// RemoteQueues are w's queues as its tenant's remote tasks name them,
// sorted.
func (w RemoteWorker) RemoteQueues() []string {
	out := make([]string, 0, len(w.Queues))
	for q := range w.Queues {
		out = append(out, dispatch.RemoteQueue(q, w.Tenant))
	}
	slices.Sort(out)
	return out
}

// Bounds of the remote workers of one API key: the worker names it runs
// at once, and the slots they declare together (each worker's in all
// its queues), which admission counts as its tenant's remote capacity.
const (
	MaxWorkersPerKey = 100
	MaxSlotsPerKey   = 10_000
)

// WorkerLimitError is a registration past a key's bounds.
type WorkerLimitError struct{ Message string }

func (e *WorkerLimitError) Error() string { return e.Message }

// Register writes w's row in workers, or renews it for ttl: its slots
// in its tenant's remote queues count for admission while it lives. A
// worker past its key's bounds (with the key's other live workers) is
// refused, a *WorkerLimitError.
func (w RemoteWorker) Register(ctx context.Context, db store.DBTX, ttl time.Duration) error {
	slots := make(map[string]int, len(w.Queues))
	total := 0
	for q, n := range w.Queues {
		slots[dispatch.RemoteQueue(q, w.Tenant)] = n
		total += n
	}
	if w.Key != uuid.Nil {
		others, err := store.New(db).KeyWorkers(ctx, store.KeyWorkersParams{KeyID: &w.Key, Self: w.ID})
		if err != nil {
			return err
		}
		switch {
		case int(others.Workers) >= MaxWorkersPerKey:
			return &WorkerLimitError{fmt.Sprintf("this key runs %d live workers; a key runs at most %d (reuse worker names, or use another key)", others.Workers, MaxWorkersPerKey)}
		case others.Slots+int64(total) > MaxSlotsPerKey:
			return &WorkerLimitError{fmt.Sprintf("this key's live workers declare %d slots and this one %d; a key's workers declare at most %d together", others.Slots, total, MaxSlotsPerKey)}
		}
	}
	queues, err := json.Marshal(slots)
	if err != nil {
		return err
	}
	types, err := json.Marshal(w.Types)
	if err != nil {
		return err
	}
	tenant := w.Tenant
	var key *uuid.UUID
	if w.Key != uuid.Nil {
		key = &w.Key
	}
	p := store.HeartbeatRemoteWorkerParams{ID: w.ID, Name: w.Name, Queues: queues,
		TenantID: &tenant, Types: types, TtlSeconds: ttl.Seconds(), KeyID: key}
	p.CapCpu, p.CapMemory, p.CapGpu, p.CapCustom = store.CapacityColumns(w.Capacity)
	return store.New(db).HeartbeatRemoteWorker(ctx, p)
}

// OfferRemote turns a batch of a gateway's River jobs into offers: each
// task still at the attempt before its job's (a stale job offers
// nothing), with its step's worker type. It takes no lock; an offer made
// again changes nothing.
func OfferRemote(ctx context.Context, db store.DBTX, starts []Start) error {
	p := store.OfferableTasksParams{}
	for _, st := range starts {
		p.Ids = append(p.Ids, st.TaskID)
		p.Attempts = append(p.Attempts, int32(st.Attempt))
	}
	q := store.New(db)
	rows, err := q.OfferableTasks(ctx, p)
	if err != nil || len(rows) == 0 {
		return err
	}
	keys := make([]specKey, len(rows))
	for i, r := range rows {
		keys[i] = specKey{r.JobID, r.JobVersion}
	}
	batchSpecs, err := specs.getMany(ctx, db, keys)
	if err != nil {
		return err
	}
	var in store.InsertOffersParams
	for _, r := range rows {
		spec := batchSpecs[specKey{r.JobID, r.JobVersion}]
		idx := spec.stepIndex(r.Step)
		if idx < 0 || spec.Steps[idx].Run.Worker == "" {
			return fmt.Errorf("task %s: step %q of its job version is not a remote step", r.ID, r.Step)
		}
		in.TaskIds = append(in.TaskIds, r.ID)
		in.Attempts = append(in.Attempts, r.Attempt)
		in.TenantIds = append(in.TenantIds, r.TenantID)
		in.Queues = append(in.Queues, r.Queue)
		in.WorkerTypes = append(in.WorkerTypes, spec.Steps[idx].Run.Worker)
		in.Namespaces = append(in.Namespaces, r.Namespace)
		in.Priorities = append(in.Priorities, r.Priority)
	}
	return q.InsertOffers(ctx, in)
}

// ClaimRemote takes up to max offers w may run (its tenant's, queues,
// types and namespaces) and starts their attempts on w, each under a
// lease of its own (lease, never past its step's timeout), in tx. An
// offer whose task moved on (cancelled, or started by another claim of
// a redelivered offer) is dropped. The attempts whose expressions failed
// (Attempt.Refused) are started too: the caller reports them at once.
func ClaimRemote(ctx context.Context, tx pgx.Tx, w RemoteWorker, max int, lease time.Duration) ([]*Attempt, error) {
	q := store.New(tx)
	var taken []store.TakeOffersRow
	var err error
	if w.Capacity == nil {
		taken, err = q.TakeOffers(ctx, store.TakeOffersParams{Queues: w.RemoteQueues(), WorkerTypes: w.Types,
			Namespaces: w.Namespaces, Max: int32(max)})
	} else {
		taken, err = takeFitting(ctx, q, w, max)
	}
	if err != nil || len(taken) == 0 {
		return nil, err
	}
	// Lock order: tasks by id, as every batch of starts.
	slices.SortFunc(taken, func(a, b store.TakeOffersRow) int { return slices.Compare(a.TaskID[:], b.TaskID[:]) })
	starts := make([]Start, len(taken))
	for i, t := range taken {
		starts[i] = Start{TaskID: t.TaskID, Attempt: int(t.Attempt)}
	}
	started, err := StartAttempts(ctx, tx, starts, Worker{Name: w.Name, ID: w.ID})
	if err != nil {
		return nil, err
	}
	var out []*Attempt
	lp := store.LeaseRemoteAttemptsParams{LeaseSeconds: lease.Seconds()}
	for _, a := range started {
		if a == nil {
			continue
		}
		out = append(out, a)
		lp.Ids = append(lp.Ids, a.Call.TaskID)
		lp.Tokens = append(lp.Tokens, a.Call.FencingToken)
		lp.TimeoutSeconds = append(lp.TimeoutSeconds, a.Timeout.Seconds())
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, q.LeaseRemoteAttempts(ctx, lp)
}

// Held is an attempt a remote worker says it runs.
type Held struct {
	TaskID       uuid.UUID
	FencingToken int64
}

// Why a heartbeat answers that an attempt must stop.
const (
	StopLeaseLost = "lease_lost" // lapsed, or the task moved on (retried elsewhere)
	StopCancelled = "cancelled"  // its run was cancelled
	StopTimeout   = "timeout"    // past its step's timeout
)

// RenewRemote renews w's row (its claims register it) and the leases of the attempts it holds, in
// one transaction, and returns those it must stop, with why: an attempt
// not renewed is no longer w's to run (its lease lapsed, it was cancelled,
// it ran past its deadline).
func RenewRemote(ctx context.Context, tx pgx.Tx, w RemoteWorker, held []Held, lease time.Duration) (map[uuid.UUID]string, error) {
	q := store.New(tx)
	if err := q.RenewRemoteWorker(ctx, store.RenewRemoteWorkerParams{ID: w.ID, TtlSeconds: lease.Seconds()}); err != nil {
		return nil, err
	}
	if len(held) == 0 {
		return nil, nil
	}
	p := store.RenewRemoteLeasesParams{LeaseSeconds: lease.Seconds(), WorkerID: &w.ID}
	held = slices.Clone(held)
	slices.SortFunc(held, func(a, b Held) int { return slices.Compare(a.TaskID[:], b.TaskID[:]) }) // lock order: tasks by id
	for _, h := range held {
		p.Ids = append(p.Ids, h.TaskID)
		p.Tokens = append(p.Tokens, h.FencingToken)
	}
	renewed, err := q.RenewRemoteLeases(ctx, p)
	if err != nil {
		return nil, err
	}
	kept := make(map[uuid.UUID]bool, len(renewed))
	for _, id := range renewed {
		kept[id] = true
	}
	stop := map[uuid.UUID]string{}
	tokens := map[uuid.UUID]int64{}
	for _, h := range held {
		if !kept[h.TaskID] {
			stop[h.TaskID] = StopLeaseLost
			tokens[h.TaskID] = h.FencingToken
		}
	}
	if len(stop) == 0 {
		return nil, nil
	}
	states, err := q.RemoteAttemptStates(ctx, slices.Collect(maps.Keys(stop)))
	if err != nil {
		return nil, err
	}
	for _, s := range states {
		switch {
		case s.FencingToken != tokens[s.ID] || s.WorkerID == nil || *s.WorkerID != w.ID:
		case s.Status == lifecycle.TaskCancelled:
			stop[s.ID] = StopCancelled
		case s.Status == lifecycle.TaskRunning && s.PastDeadline:
			stop[s.ID] = StopTimeout
		}
	}
	return stop, nil
}

// ErrNotHeld is a report of an attempt that did not start on the worker
// that reports it (or does not exist in its tenant).
var ErrNotHeld = errors.New("no attempt of this task with this fencing token started on this worker")

// RemoteReports checks that each of reports is about an attempt that
// started on w, and fills in its run and its step's shape, in one query;
// it returns the tasks' queues too. A worker reports only what it
// claimed: one report about an attempt that did not start on w refuses
// them all (a NotHeldError, naming its index). The reports are then
// finished as a local worker's are (Applier.Finish), fenced by their
// tokens: an attempt no longer w's (its lease lapsed, it was retried
// elsewhere) records its report as late and changes nothing.
func RemoteReports(ctx context.Context, db store.DBTX, w RemoteWorker, reports []Report) ([]Report, map[string]bool, error) {
	p := store.RemoteAttemptsParams{TenantID: w.Tenant, Worker: w.Name}
	for _, r := range reports {
		p.Ids = append(p.Ids, r.TaskID)
		p.FencingTokens = append(p.FencingTokens, r.FencingToken)
	}
	rows, err := store.New(db).RemoteAttempts(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	byAttempt := make(map[attemptKey]store.RemoteAttemptsRow, len(rows))
	keys := make([]specKey, len(rows))
	for i, row := range rows {
		byAttempt[attemptKey{row.ID, row.FencingToken}] = row
		keys[i] = specKey{row.JobID, row.JobVersion}
	}
	got, err := specs.getMany(ctx, db, keys)
	if err != nil {
		return nil, nil, err
	}
	out := slices.Clone(reports)
	queues := map[string]bool{}
	for i := range out {
		r := &out[i]
		row, ok := byAttempt[attemptKey{r.TaskID, r.FencingToken}]
		if !ok {
			return nil, nil, &NotHeldError{Index: i, TaskID: r.TaskID}
		}
		r.RunID = row.RunID
		if sh, ok := shapeOf(got[specKey{row.JobID, row.JobVersion}], row.Step, int(row.Attempt)); ok {
			r.Shape = &sh
		}
		queues[row.Queue] = true
	}
	return out, queues, nil
}

// NotHeldError is a report, the Index-th of its request, about an attempt
// that did not start on the worker reporting it: it is ErrNotHeld.
type NotHeldError struct {
	Index  int
	TaskID uuid.UUID
}

func (e *NotHeldError) Error() string { return fmt.Sprintf("%v: task %s", ErrNotHeld, e.TaskID) }

// Is makes errors.Is(e, ErrNotHeld) hold.
func (e *NotHeldError) Is(target error) bool { return target == ErrNotHeld }

// fitScan bounds the offers one claim of a worker with a capacity looks
// at, per attempt it may take, among those that each fit what it has free
// (the scan skips the others): past the first that no longer fit once the
// earlier ones are added up, it leaves the rest for the next claim.
const fitScan = 4

// takeFitting takes up to most offers, most urgent first, each fitting
// what w's capacity leaves free once its running attempts and the offers
// taken before it are counted; an offer that does not fit stays for a
// worker it fits. It holds w's row while it decides, so that two claims of
// one worker at once do not both fill the same room.
func takeFitting(ctx context.Context, q *store.Queries, w RemoteWorker, most int) ([]store.TakeOffersRow, error) {
	if err := q.LockRemoteWorker(ctx, w.ID); err != nil {
		return nil, err
	}
	used, err := q.RemoteWorkerUse(ctx, &w.ID) // after the lock: a fresh snapshot
	if err != nil {
		return nil, err
	}
	free := w.Capacity.Sub(resources.FromColumns(used.Cpu, used.Memory, used.Gpu, used.Custom))
	// (Less than none free, its capacity lowered: none.)
	offers, err := q.ScanOffers(ctx, store.ScanOffersParams{Queues: w.RemoteQueues(), WorkerTypes: w.Types,
		Namespaces: w.Namespaces, Max: int32(most * fitScan),
		FreeCpu: max(free.CPU, 0), FreeMemory: max(free.Memory, 0), FreeGpu: max(free.GPU, 0)})
	if err != nil {
		return nil, err
	}
	var chosen []uuid.UUID
	for _, o := range offers {
		need := resources.FromColumns(o.ResCpu, o.ResMemory, o.ResGpu, o.ResCustom)
		if !need.FitsIn(free) {
			continue
		}
		free = free.Sub(need)
		chosen = append(chosen, o.TaskID)
		if len(chosen) == most {
			break
		}
	}
	if len(chosen) == 0 {
		return nil, nil
	}
	rows, err := q.TakeChosenOffers(ctx, chosen)
	taken := make([]store.TakeOffersRow, len(rows))
	for i, r := range rows {
		taken[i] = store.TakeOffersRow(r)
	}
	return taken, err
}
