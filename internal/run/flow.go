package run

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/store"
)

// Step-level concurrency keys (docs/flow-control.md, "Step level"): a
// keyed step's task holds its keys from its release until it ends; one
// released at a key's limit is held (queued, flow_wait the key, not
// eligible for admission) until an end of that key promotes it. A key's
// holders are counted from the tasks' rows under the key's lock, so a
// crash leaks nothing: what did not commit holds nothing.

// ReasonKeyHeld starts the wait reason of a task held by a step key.
const ReasonKeyHeld = "concurrency key"

// FailpointKeysPromoted is hit in the transaction that ends a holder of
// a step key, once it has released the tasks held on it and before it
// commits.
const FailpointKeysPromoted = "run/keys-promoted"

// maxPromote bounds the tasks one key's promotion reads in a transaction.
const maxPromote = 100

// flowKey is a step key: its tenant's, by value.
type flowKey struct {
	tenant uuid.UUID
	key    string
}

// lockName is the advisory lock of a step key (LockConcurrencyKeys').
func (k flowKey) lockName() string { return "step/" + k.tenant.String() + "/" + k.key }

func compareFlowKeys(a, b flowKey) int {
	return cmp.Or(bytes.Compare(a.tenant[:], b.tenant[:]), cmp.Compare(a.key, b.key))
}

// lockKeys takes the locks of keys in key order and counts their holders.
func (ap *applying) lockKeys(ctx context.Context, keys []flowKey) (map[flowKey]int, error) {
	names := make([]string, len(keys))
	p := store.FlowHoldersParams{}
	for i, k := range keys {
		names[i] = k.lockName()
		p.TenantIds = append(p.TenantIds, k.tenant)
		p.Keys = append(p.Keys, k.key)
	}
	if err := ap.q.LockConcurrencyKeys(ctx, names); err != nil {
		return nil, err
	}
	rows, err := ap.q.FlowHolders(ctx, p)
	if err != nil {
		return nil, err
	}
	held := make(map[flowKey]int, len(rows))
	for _, r := range rows {
		held[flowKey{r.TenantID, r.Key}] = int(r.N)
	}
	return held, nil
}

// keyedCandidate is a candidate of a keyed step, its keys evaluated: each
// one's value and limit.
type keyedCandidate struct {
	candidate
	keys   []string
	limits []int
}

// gateKeys decides the keyed candidates at their release: each whose
// keys all have room is returned, to be released as any other; each
// other is held on its first key at its limit. Both are written with
// their keys (KeyTasks).
func (ap *applying) gateKeys(ctx context.Context, cands []keyedCandidate) ([]candidate, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	var keys []flowKey
	for _, c := range cands {
		for _, k := range c.keys {
			keys = append(keys, flowKey{c.ready.Tenant, k})
		}
	}
	held, err := ap.lockKeys(ctx, keys)
	if err != nil {
		return nil, err
	}
	var out []candidate
	p := store.KeyTasksParams{}
	for _, c := range cands {
		wait := ""
		for i, k := range c.keys {
			if held[flowKey{c.ready.Tenant, k}] >= c.limits[i] {
				wait = k
				break
			}
		}
		if wait == "" {
			for _, k := range c.keys {
				held[flowKey{c.ready.Tenant, k}]++
			}
			out = append(out, c.candidate)
		}
		ks, _ := json.Marshal(c.keys)
		ls, _ := json.Marshal(c.limits)
		p.Ids = append(p.Ids, c.ready.TaskID)
		p.Keys = append(p.Keys, string(ks))
		p.Limits = append(p.Limits, string(ls))
		p.Waits = append(p.Waits, wait)
	}
	return out, ap.q.KeyTasks(ctx, p)
}

// keysEnded records the keys a task that ended held (keys, limits: its
// flow_keys and flow_limits), for promoteEnded. Each key's hint is the
// largest limit an ended task gave it: the room its promotion looks for.
func (ap *applying) keysEnded(tenant uuid.UUID, keys []string, limits []int32) {
	if len(keys) == 0 {
		return
	}
	if ap.ended == nil {
		ap.ended = map[flowKey]int{}
	}
	for i, k := range keys {
		fk := flowKey{tenant, k}
		lim := 1
		if i < len(limits) {
			lim = int(limits[i])
		}
		ap.ended[fk] = max(ap.ended[fk], lim)
	}
}

// promoteEnded promotes the keys of the tasks that ended in this
// transaction (keysEnded), once, after its other writes: so that its key
// locks come after every run and task lock the transaction takes.
func (ap *applying) promoteEnded(ctx context.Context) error {
	if len(ap.ended) == 0 {
		return nil
	}
	ended := ap.ended
	ap.ended = nil
	_, err := ap.promoteKeys(ctx, ended)
	return err
}

// promoteKeys releases the oldest tasks held on each key of hints that
// now fit: the keys locked in key order, their holders counted, and each
// key's held tasks read oldest first, as many as its room (its hint, the
// limit the ended tasks gave it, less its holders, at most maxPromote),
// skipping those another transaction holds. A task whose other
// key is at its limit moves to wait on that key; one whose other key's
// lock another transaction holds is left held (for that key's next end,
// or the reaper). It returns how many it released.
func (ap *applying) promoteKeys(ctx context.Context, hints map[flowKey]int) (int, error) {
	keys := make([]flowKey, 0, len(hints))
	for k := range hints {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareFlowKeys)
	held, err := ap.lockKeys(ctx, keys)
	if err != nil {
		return 0, err
	}
	locked := make(map[flowKey]bool, len(keys))
	for _, k := range keys {
		locked[k] = true
	}
	var moved store.SetFlowWaitsParams
	var ready []dispatch.Ready
	for _, k := range keys {
		rows, err := ap.heldOn(ctx, k, hints[k], held[k])
		if err != nil {
			return 0, err
		}
		for _, t := range rows {
			if held[k] >= limitOn(t.FlowKeys, t.FlowLimits, k.key) {
				break // the oldest waits first
			}
			wait, ok, err := ap.otherKeys(ctx, t, k, held, locked)
			if err != nil {
				return 0, err
			}
			if !ok {
				continue
			}
			moved.Ids = append(moved.Ids, t.ID)
			moved.Waits = append(moved.Waits, wait)
			if wait != "" {
				continue
			}
			for _, key := range t.FlowKeys {
				held[flowKey{t.TenantID, key}]++
			}
			ready = append(ready, dispatch.NextAttempt(t.ID, t.TenantID, t.Queue, t.Priority, t.Attempt).
				WithNeed(resources.FromColumns(t.ResCpu, t.ResMemory, t.ResGpu, t.ResCustom)))
		}
	}
	if len(moved.Ids) == 0 {
		return 0, nil
	}
	if err := ap.q.SetFlowWaits(ctx, moved); err != nil {
		return 0, err
	}
	ap.Failpoints.Hit(FailpointKeysPromoted)
	return len(ready), ap.Dispatcher.Release(ctx, ap.tx, ready)
}

// heldOn reads the oldest tasks held on k, as many as its room: hint (the
// limit the tasks that ended gave it, or the reaper's oldest held task's)
// less its holders.
func (ap *applying) heldOn(ctx context.Context, k flowKey, hint, holders int) ([]store.HeldOnKeyRow, error) {
	room := min(hint-holders, maxPromote)
	if room <= 0 {
		return nil, nil
	}
	return ap.q.HeldOnKey(ctx, store.HeldOnKeyParams{TenantID: k.tenant, Key: k.key, N: int32(room)})
}

// otherKeys checks a held task's keys other than k (being promoted): the
// first at its limit is the one it waits for next (wait), with ok; ok is
// false when one's lock is another transaction's (the task stays as it
// is). Each key's lock is tried, not waited for: this transaction holds
// others' already, out of key order.
func (ap *applying) otherKeys(ctx context.Context, t store.HeldOnKeyRow, k flowKey, held map[flowKey]int, locked map[flowKey]bool) (wait string, ok bool, err error) {
	for i, key := range t.FlowKeys {
		o := flowKey{t.TenantID, key}
		if o == k {
			continue
		}
		if !locked[o] {
			got, err := ap.q.TryLockKey(ctx, o.lockName())
			if err != nil || !got {
				return "", false, err
			}
			locked[o] = true
			rows, err := ap.q.FlowHolders(ctx, store.FlowHoldersParams{TenantIds: []uuid.UUID{o.tenant}, Keys: []string{o.key}})
			if err != nil {
				return "", false, err
			}
			for _, r := range rows {
				held[o] = int(r.N)
			}
		}
		if held[o] >= int(t.FlowLimits[i]) {
			return key, true, nil
		}
	}
	return "", true, nil
}

// limitOn is the limit a task's keys give key (1 when it has none).
func limitOn(keys []string, limits []int32, key string) int {
	if i := slices.Index(keys, key); i >= 0 && i < len(limits) {
		return int(limits[i])
	}
	return 1
}

// PromoteHeldKeys is the reaper's look for tasks held on a step key that
// has room (a promotion skipped them: their row, or another key's lock,
// was another transaction's): up to n keys after cursor, in key order,
// each promoted as an end of it would be. It returns the cursor to start
// the next look from (the zero cursor once it went round) and how many
// tasks it released.
func (a *Applier) PromoteHeldKeys(ctx context.Context, tx pgx.Tx, cursor KeyCursor, n int) (KeyCursor, int, error) {
	ap := a.in(tx)
	rows, err := ap.q.HeldKeys(ctx, store.HeldKeysParams{TenantID: cursor.Tenant, Key: cursor.Key, N: int32(n)})
	if err != nil || len(rows) == 0 {
		return KeyCursor{}, 0, err
	}
	hints := make(map[flowKey]int, len(rows))
	for _, r := range rows { // the room its oldest task's limit gives
		hints[flowKey{r.TenantID, r.Key}] = limitOn(r.FlowKeys, r.FlowLimits, r.Key)
	}
	got, err := ap.promoteKeys(ctx, hints)
	next := KeyCursor{}
	if last := rows[len(rows)-1]; len(rows) == n {
		next = KeyCursor{last.TenantID, last.Key}
	}
	return next, got, err
}

// KeyCursor is where the reaper's look at held keys goes on from.
type KeyCursor struct {
	Tenant uuid.UUID
	Key    string
}
