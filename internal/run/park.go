package run

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/expr"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/store"
)

// Parked steps (docs/parked-steps.md): released, a step that sleeps or
// waits is parked in the releasing transaction (park): its task running,
// with an attempt on record on no worker, and its parked_steps row saying
// what ends it. The scheduler node of its shard ends it when it is due
// (WakeParked: a sleep's time, a wait's timeout), and the events step when
// an event it waits for arrives (EndWaits), each through Finish, as a
// worker's report would.

// FailpointParkedWoken is hit in the transaction that ends due parked
// steps (WakeParked), once their ends are written, before it commits.
const FailpointParkedWoken = "run/parked-woken"

// FailpointWaitsEnded is hit in the events step's transaction once the
// waits its events end are written (EndWaits), before it commits.
const FailpointWaitsEnded = "run/waits-ended"

// The workers a parked step's attempts name.
const (
	sleepWorker    = "orrery (sleep)"
	waitWorker     = "orrery (wait)"
	approvalWorker = "orrery (approval)"
)

// pendingPark is a released step that parks.
type pendingPark struct {
	cand  candidate
	run   store.ConditionRunsRow
	step  dag.Step
	exprs *dag.StepExprs
}

// park parks the released steps of todo: a sleep's instant evaluated (its
// until), a wait's or an approval's timeout counted from now, an
// approval's message rendered; each task running and its row written. A
// sleep whose instant does not evaluate, or is past the bound, and an
// approval whose message does not render, go to v.fail.
func (ap *applying) park(ctx context.Context, todo []pendingPark, outputs *outputsToRead, v *verdicts) error {
	if len(todo) == 0 {
		return nil
	}
	if outputs.read == nil { // (childCalls may have read them)
		if err := outputs.load(ctx, ap.q); err != nil {
			return err
		}
	}
	spent := budgets{}
	var p store.ParkTasksParams
	var lock store.LockWaitKindsSharedParams // the waits' tenants and types
	var now time.Time                        // the database's, read for the first until
	unkeyed := map[waitKind]int{}            // waits without a key, parked and to park
	for _, t := range todo {
		kind, worker, eventType, key, path, message := "sleep", sleepWorker, "", "", "", ""
		var after float64
		var until time.Time
		switch w, sl, a := t.step.Wait, t.step.Sleep, t.step.Approval; {
		case a != nil:
			kind, worker, after = "approval", approvalWorker, a.Timeout.Seconds()
			m, err := t.exprs.Text("approval.message", a.Message, outputs.vars(runOfRow(t.run, t.cand.ready.Attempt), readsOf(t.exprs), spent.of(t.run.ID)))
			if err != nil {
				v.fail = append(v.fail, verdict{t.cand, err.Error()})
				continue
			}
			message = dag.Clip(m, dag.MaxApprovalMessage)
		case w != nil:
			kind, worker, eventType, after = "wait", waitWorker, w.Event, w.Timeout.Seconds()
			key, path = t.exprs.WaitKey(outputs.vars(runOfRow(t.run, t.cand.ready.Attempt), matchReads(t.exprs), spent.of(t.run.ID)))
			if key == "" {
				why, err := ap.unkeyedRoom(ctx, unkeyed, waitKind{t.run.TenantID, eventType})
				if err != nil {
					return err
				}
				if why != "" {
					v.fail = append(v.fail, verdict{t.cand, why})
					continue
				}
			}
			lock.TenantIds, lock.Types = append(lock.TenantIds, t.run.TenantID), append(lock.Types, eventType)
		case sl.Until == "":
			after = sl.For.Seconds()
		default:
			s, err := t.exprs.Text("sleep.until", sl.Until, outputs.vars(runOfRow(t.run, t.cand.ready.Attempt), readsOf(t.exprs), spent.of(t.run.ID)))
			if err != nil {
				v.fail = append(v.fail, verdict{t.cand, err.Error()})
				continue
			}
			if now.IsZero() {
				if now, err = ap.q.DatabaseNow(ctx); err != nil {
					return err
				}
			}
			if until, err = sleepUntil(s, now); err != nil {
				v.fail = append(v.fail, verdict{t.cand, err.Error()})
				continue
			}
		}
		p.Ids = append(p.Ids, t.cand.ready.TaskID)
		p.AttemptIds = append(p.AttemptIds, uuid.Must(uuid.NewV7()))
		p.Workers = append(p.Workers, worker)
		p.Kinds = append(p.Kinds, kind)
		p.Shards = append(p.Shards, t.run.Shard)
		p.AfterSeconds = append(p.AfterSeconds, after)
		p.Untils = append(p.Untils, until)
		p.EventTypes = append(p.EventTypes, eventType)
		p.MatchKeys = append(p.MatchKeys, key)
		p.MatchPaths = append(p.MatchPaths, path)
		p.Messages = append(p.Messages, message)
	}
	if len(p.Ids) == 0 {
		return nil
	}
	if len(lock.Types) > 0 {
		if err := ap.q.LockWaitKindsShared(ctx, lock); err != nil {
			return err
		}
		// (under SERIALIZABLE, the read an events step taking an event
		// for these waits meanwhile conflicts with)
		if _, err := ap.q.ReadEventsOfWaits(ctx, store.ReadEventsOfWaitsParams(lock)); err != nil {
			return err
		}
	}
	parked, err := ap.q.ParkTasks(ctx, p)
	if err != nil {
		return err
	}
	if len(parked) != len(p.Ids) {
		return fmt.Errorf("parked %d of %d steps: a task moved meanwhile", len(parked), len(p.Ids))
	}
	return nil
}

// sleepUntil reads a sleep's until, evaluated to s, at the database's now.
func sleepUntil(s string, now time.Time) (time.Time, error) {
	at, err := time.Parse(time.RFC3339, s)
	switch {
	case err != nil:
		return at, fmt.Errorf("sleep.until: %.100q is not an RFC 3339 instant", s)
	case at.After(now.Add(dag.MaxSleep)):
		return at, fmt.Errorf("sleep.until: %s is more than 366 days ahead", at.UTC().Format(time.RFC3339))
	}
	return at, nil
}

// unkeyedRoom counts one more wait of k without a key (counted: the
// batch's so far, read once from the database), or says why it may not
// park (MaxUnkeyedWaits).
func (ap *applying) unkeyedRoom(ctx context.Context, counted map[waitKind]int, k waitKind) (string, error) {
	n, ok := counted[k]
	if !ok {
		rows, err := ap.q.UnkeyedWaits(ctx, store.UnkeyedWaitsParams{TenantIds: []uuid.UUID{k.tenant}, Types: []string{k.typ}, Cap: MaxUnkeyedWaits})
		if err != nil {
			return "", err
		}
		if len(rows) == 1 {
			n = int(rows[0].N)
		}
	}
	if n >= MaxUnkeyedWaits {
		return fmt.Sprintf("wait.match: the tenant has %d steps waiting for %s whose match is not indexed, the most it may: each such event asks every one (write the match as event.FIELD == EXPR to index it)",
			MaxUnkeyedWaits, k.typ), nil
	}
	counted[k] = n + 1
	return "", nil
}

// readsOf is the steps an expression of the step reads (none without
// expressions).
func readsOf(x *dag.StepExprs) []string {
	if x == nil {
		return nil
	}
	return x.Reads.Steps
}

// WakeParked ends the shards' parked steps that are due, at most batch of
// them, in the caller's transaction: a sleep succeeds with {"until",
// "time"}, a wait or an approval times out (it fails, or is skipped). Each attempt ends under the
// fencing token its row holds, with all that follows (Finish), and the
// rows are deleted. The runs are locked before the rows, as a cancel
// locks them before it deletes the rows. It returns the steps (tasks) it
// took, also when it fails after taking them.
func (a *Applier) WakeParked(ctx context.Context, tx pgx.Tx, shards []int32, batch int32) ([]uuid.UUID, error) {
	ap := a.in(tx)
	due, err := ap.q.DueParked(ctx, store.DueParkedParams{Shards: shards, Batch: batch})
	if err != nil || len(due) == 0 {
		return nil, err
	}
	ids := make([]uuid.UUID, len(due))
	runs := make([]uuid.UUID, len(due))
	tokens := make([]int64, len(due))
	for i, d := range due {
		ids[i], runs[i], tokens[i] = d.TaskID, d.RunID, d.FencingToken
	}
	rows, err := ap.lockParked(ctx, runs, ids, tokens)
	if err != nil {
		return ids, err
	}
	reports := make([]Report, 0, len(rows))
	for _, r := range rows {
		now := r.Now.UTC()
		var until time.Time
		if r.WakeAt != nil {
			until = r.WakeAt.UTC()
		}
		var res executor.Result
		switch {
		case r.Kind == "wait" && r.EventType != nil:
			res = timedOut(fmt.Sprintf("wait: no %s event matched before its timeout (%s)", *r.EventType, until.Format(time.RFC3339)))
		case r.Kind == "approval":
			res = timedOut(fmt.Sprintf("approval: not decided before its timeout (%s)", until.Format(time.RFC3339)))
		default:
			out, _ := json.Marshal(map[string]string{"until": until.Format(time.RFC3339Nano), "time": now.Format(time.RFC3339Nano)})
			res = executor.Result{OK: true, Output: string(out)}
		}
		reports = append(reports, Report{TaskID: r.TaskID, RunID: r.RunID, FencingToken: r.FencingToken, Result: res})
	}
	if err := ap.endParked(ctx, reports); err != nil {
		return ids, err
	}
	a.Failpoints.Hit(FailpointParkedWoken)
	return ids, nil
}

// timedOut is the end of a parked step at its timeout: it fails, or is
// skipped when its step says on_timeout: skip (lifecycle.FinishAttempt).
func timedOut(why string) executor.Result {
	return executor.Result{ExitReason: executor.ReasonTimeout, FailureClass: executor.ClassUser, Error: why}
}

// lockParked locks the runs, in key order, then the parked rows of tasks
// (parked under tokens), and returns the rows still there as they were
// read.
func (ap *applying) lockParked(ctx context.Context, runs, tasks []uuid.UUID, tokens []int64) ([]store.LockParkedRow, error) {
	if err := ap.q.LockRuns(ctx, sortedUnique(runs)); err != nil {
		return nil, err
	}
	return ap.q.LockParked(ctx, store.LockParkedParams{TaskIds: tasks, Tokens: tokens})
}

// endParked finishes parked steps' attempts and deletes their rows.
func (ap *applying) endParked(ctx context.Context, reports []Report) error {
	if len(reports) == 0 {
		return nil
	}
	if _, err := ap.finish(ctx, reports); err != nil {
		return err
	}
	ids := make([]uuid.UUID, len(reports))
	for i, r := range reports {
		ids[i] = r.TaskID
	}
	return ap.q.DeleteParked(ctx, ids)
}

// MaxUnkeyedWaits bounds the parked waits of a tenant and event type
// whose match is not indexed (no key): every event of the type asks each
// of them its match, in the events step every tenant shares. A step
// past it fails, naming the bound.
const MaxUnkeyedWaits = 1000

// waitKind is a tenant's event type, as waits are counted.
type waitKind struct {
	tenant uuid.UUID
	typ    string
}

// An Arrival is an event the events step takes, as a wait sees it.
type Arrival struct {
	Tenant     uuid.UUID
	Type       string
	ReceivedAt time.Time
	// Event is its JSON form, as run.event holds it (id, type, source,
	// time, data): the waiting step's output.
	Event []byte
	// Fields is Event as expressions read it (expr.FromJSON's values).
	Fields map[string]any
}

// EndWaits ends the parked waits that the arriving events end, in the
// caller's transaction (the events step's, which marks the events taken
// in it): a wait of an event's tenant and type that parked before the
// event was received, whose match holds for it, succeeds with the event
// as its output; the first such event of the batch ends it. An event
// offers the keys of its fields at the paths the waits of its type index
// (WaitPaths), and asks the waits with one of those keys, or with none.
// Each match is evaluated with its own cost budget; one that fails on an
// event (a field it lacks, its cost) does not end the wait with it. More
// than MaxWaitsAsked candidates in a batch is an error (the batch is then
// taken an event at a time, and an event that alone passes the bound is
// set aside). It returns how many waits it ended.
func (a *Applier) EndWaits(ctx context.Context, tx pgx.Tx, events []Arrival) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	ap := a.in(tx)
	var wp store.WaitPathsParams
	for _, e := range events {
		wp.TenantIds = append(wp.TenantIds, e.Tenant)
		wp.Types = append(wp.Types, e.Type)
	}
	// The parks of these events' waits in flight commit first; a later
	// one is stamped after these events (LockWaitKinds).
	if err := ap.q.LockWaitKinds(ctx, store.LockWaitKindsParams{TenantIds: wp.TenantIds, Types: wp.Types}); err != nil {
		return 0, err
	}
	wp.MaxPaths = maxWaitPaths
	paths, err := ap.q.WaitPaths(ctx, wp)
	if err != nil {
		return 0, err
	}
	inUse := map[waitKind][]string{}
	for _, p := range paths {
		k := waitKind{p.TenantID, p.Type}
		inUse[k] = append(inUse[k], p.Path)
	}
	var p store.WaitsForParams
	for i, e := range events {
		p.TenantIds = append(p.TenantIds, e.Tenant)
		p.Types = append(p.Types, e.Type)
		p.ReceivedAts = append(p.ReceivedAts, e.ReceivedAt)
		for _, path := range inUse[waitKind{e.Tenant, e.Type}] {
			if k, ok := expr.KeyAt(e.Fields, path); ok {
				p.KeyEvents = append(p.KeyEvents, int32(i+1))
				p.Keys = append(p.Keys, k)
			}
		}
	}
	p.MaxWaits = MaxWaitsAsked + 1
	cands, err := ap.q.WaitsFor(ctx, p)
	if err != nil || len(cands) == 0 {
		return 0, err
	}
	if len(cands) > MaxWaitsAsked {
		return 0, fmt.Errorf("the events of the batch would ask more than %d parked waits their match", MaxWaitsAsked)
	}
	keys := make([]specKey, len(cands))
	runIDs := make([]uuid.UUID, len(cands))
	for i, c := range cands {
		keys[i], runIDs[i] = specKey{c.JobID, c.JobVersion}, c.RunID
	}
	got, err := specs.getMany(ctx, ap.tx, keys)
	if err != nil {
		return 0, err
	}
	runRows, err := ap.q.ConditionRuns(ctx, sortedUnique(runIDs)) // each run's variables once
	if err != nil {
		return 0, err
	}
	byRun := make(map[uuid.UUID]store.ConditionRunsRow, len(runRows))
	for _, r := range runRows {
		byRun[r.ID] = r
	}
	var outputs outputsToRead
	for _, c := range cands {
		if x := got[specKey{c.JobID, c.JobVersion}].exprs.Step(c.Step); x != nil {
			outputs.add(c.RunID, x.MatchReads.Steps)
		}
	}
	if err := outputs.load(ctx, ap.q); err != nil {
		return 0, err
	}
	chosen := map[uuid.UUID]int{} // a wait's task: the index of the event that ends it
	var runs, tasks []uuid.UUID
	var tokens []int64
	for _, c := range cands { // by task, then event: a task's first match wins
		if _, done := chosen[c.TaskID]; done {
			continue
		}
		spec := got[specKey{c.JobID, c.JobVersion}]
		r, found := byRun[c.RunID]
		i := spec.stepIndex(c.Step)
		if !found || i < 0 || spec.Steps[i].Wait == nil {
			continue // a task of a version without the wait (not met)
		}
		x := spec.exprs.Step(c.Step)
		if spec.Steps[i].Wait.Match != "" && x == nil {
			continue // its match does not compile any more: no event ends it, its timeout does
		}
		var spent uint64 // each match its own budget
		vars := outputs.vars(runOfRow(r, int(c.Attempt)), matchReads(x), &spent)
		vars.Incoming = events[int(c.EventIndex)-1].Fields
		if vars.Incoming == nil { // (nil would read the run's own event)
			vars.Incoming = map[string]any{}
		}
		if ok, err := x.Match(vars); err != nil || !ok {
			continue // not this event (a match that fails on it ends nothing)
		}
		chosen[c.TaskID] = int(c.EventIndex) - 1
		runs, tasks, tokens = append(runs, c.RunID), append(tasks, c.TaskID), append(tokens, c.FencingToken)
	}
	if len(tasks) == 0 {
		return 0, nil
	}
	rows, err := ap.lockParked(ctx, runs, tasks, tokens)
	if err != nil {
		return 0, err
	}
	reports := make([]Report, 0, len(rows))
	for _, r := range rows {
		if r.Kind != "wait" {
			continue
		}
		reports = append(reports, Report{TaskID: r.TaskID, RunID: r.RunID, FencingToken: r.FencingToken,
			Result: executor.Result{OK: true, Output: string(events[chosen[r.TaskID]].Event)}})
	}
	slices.SortFunc(reports, func(x, y Report) int { return slices.Compare(x.RunID[:], y.RunID[:]) })
	if err := ap.endParked(ctx, reports); err != nil {
		return 0, err
	}
	a.Failpoints.Hit(FailpointWaitsEnded)
	return len(reports), nil
}

// MaxWaitsAsked bounds the parked waits one events transaction asks their
// match (each once per event of the batch that may end it).
const MaxWaitsAsked = 10_000

// maxWaitPaths bounds the match paths in use that one events transaction
// reads for its events' tenants and types.
const maxWaitPaths = 1000

// matchReads is the steps a wait's match reads.
func matchReads(x *dag.StepExprs) []string {
	if x == nil {
		return nil
	}
	return x.MatchReads.Steps
}
