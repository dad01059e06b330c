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
// keyed step's task holds its keys from its release (queued) until it
// ends; at its release it is held (waiting, with no parent left, flow_wait
// its key: no admission, start or offer reads it) until the promotion its
// transaction runs last, or a later one, releases it. A key's holders
// are counted from the tasks' rows under the key's lock, so a crash leaks
// nothing: what did not commit holds nothing.

// ReasonKeyHeld starts the wait reason of a task held by a step key (as
// a run's queued for a job key).
const ReasonKeyHeld = ReasonConcurrencyQueue

// FailpointKeysPromoted is hit in the transaction that ends a holder of
// a step key, once it has released the tasks held on it and before it
// commits.
const FailpointKeysPromoted = "run/keys-promoted"

// maxPromote bounds the tasks one read of a key's held tasks takes, and
// maxPromoteTx those a transaction's promotion reads in all.
const (
	maxPromote   = 100
	maxPromoteTx = 1000
)

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

// lockKeys takes the locks of keys (sorted) in key order, or with try
// those no other transaction holds, and counts their holders; it returns
// the keys it locked.
func (ap *applying) lockKeys(ctx context.Context, keys []flowKey, try bool) ([]flowKey, map[flowKey]int, error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.lockName()
	}
	if !try {
		if err := ap.q.LockConcurrencyKeys(ctx, names); err != nil {
			return nil, nil, err
		}
	} else {
		got, err := ap.q.TryLockKeys(ctx, names)
		if err != nil {
			return nil, nil, err
		}
		keys = slices.DeleteFunc(slices.Clone(keys), func(k flowKey) bool { return !slices.Contains(got, k.lockName()) })
	}
	held, err := countHolders(ctx, ap.q, keys)
	return keys, held, err
}

// countHolders counts the tasks holding each of keys.
func countHolders(ctx context.Context, q *store.Queries, keys []flowKey) (map[flowKey]int, error) {
	p := store.FlowHoldersParams{}
	for _, k := range keys {
		p.TenantIds = append(p.TenantIds, k.tenant)
		p.Keys = append(p.Keys, k.key)
	}
	rows, err := q.FlowHolders(ctx, p)
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

// gateKeys writes the keyed candidates held on their first key, with
// their keys (KeyTasks), and leaves their release to the promotion this
// transaction runs last (touch): the oldest tasks held on a key go
// first, a task released into a key with room is released there, and
// the key's lock is taken once, with the transaction's others.
func (ap *applying) gateKeys(ctx context.Context, cands []keyedCandidate) error {
	if len(cands) == 0 {
		return nil
	}
	p := store.KeyTasksParams{}
	touched := map[flowKey]int{}
	for _, c := range cands {
		ks, _ := json.Marshal(c.keys)
		ls, _ := json.Marshal(c.limits)
		p.Ids = append(p.Ids, c.ready.TaskID)
		p.Keys = append(p.Keys, string(ks))
		p.Limits = append(p.Limits, string(ls))
		p.Waits = append(p.Waits, c.keys[0])
		k := flowKey{c.ready.Tenant, c.keys[0]}
		touched[k] = max(touched[k], c.limits[0])
	}
	if err := ap.q.KeyTasks(ctx, p); err != nil {
		return err
	}
	return ap.touch(ctx, touched)
}

// keysEnded promotes the keys a task that ended held (keys, limits: its
// flow_keys and flow_limits) before the transaction commits (touch).
func (ap *applying) keysEnded(ctx context.Context, tenant uuid.UUID, keys []string, limits []int32) error {
	if len(keys) == 0 {
		return nil
	}
	touched := make(map[flowKey]int, len(keys))
	addKeys(touched, tenant, keys, limits)
	return ap.touch(ctx, touched)
}

// addKeys adds a task's keys (keys, limits: its flow_keys and
// flow_limits) to touched, each with the larger of the limits given it.
func addKeys(touched map[flowKey]int, tenant uuid.UUID, keys []string, limits []int32) {
	for i, k := range keys {
		if i < len(limits) {
			fk := flowKey{tenant, k}
			touched[fk] = max(touched[fk], int(limits[i]))
		}
	}
}

// touch records keys (each with the room its promotion looks for: the
// largest limit a task that touched it gave it) for the promotion the
// transaction runs last, once, after every other write and lock of it
// (store.BeforeCommitLast): so the step keys' locks are one batch in key
// order, and no two transactions wait on each other's.
func (ap *applying) touch(ctx context.Context, keys map[flowKey]int) error {
	if len(keys) == 0 {
		return nil
	}
	v, fresh := store.TxValue(ap.tx, "run.flow-keys", func() any { return map[flowKey]int{} })
	all := v.(map[flowKey]int)
	for k, h := range keys {
		all[k] = max(all[k], h)
	}
	if !fresh {
		return nil
	}
	return store.BeforeCommitLast(ctx, ap.tx, func(ctx context.Context) error {
		_, err := ap.promoteKeys(ctx, all, false)
		return err
	})
}

// promoteKeys releases the oldest tasks held on each key of hints that
// now fit: the keys locked in key order (with try, only those no other
// transaction holds: the reaper's, which waits for none), their holders
// counted, and each key's held tasks read oldest first (heldOn),
// skipping those another transaction holds; the first that does not fit
// its own limit stops the key (first in, first out). A task whose other
// key is at its limit moves to wait on that key; one whose other key's
// lock another transaction holds is left held (for that key's next end,
// or the reaper). It returns how many it released.
func (ap *applying) promoteKeys(ctx context.Context, hints map[flowKey]int, try bool) (int, error) {
	keys := make([]flowKey, 0, len(hints))
	for k := range hints {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareFlowKeys)
	keys, held, err := ap.lockKeys(ctx, keys, try)
	if err != nil {
		return 0, err
	}
	locked := make(map[flowKey]bool, len(keys))
	for _, k := range keys {
		locked[k] = true
	}
	var moved store.SetFlowWaitsParams
	var ready []dispatch.Ready
	budget := maxPromoteTx
	for _, k := range keys {
		// Pages of its held tasks, oldest first, while it has room: a
		// task moved to another key, or left for its other key's busy
		// lock, takes no room, and the next page goes on past it.
		room, after := max(hints[k]-held[k], 1), uuid.Nil
		for budget > 0 {
			rows, more, err := ap.heldOn(ctx, k, room, held[k], after)
			if err != nil {
				return 0, err
			}
			full := false
			for _, t := range rows {
				budget--
				after = t.ID
				lim := limitOn(t.FlowKeys, t.FlowLimits, k.key)
				if held[k] >= lim {
					full = true // the oldest waits first
					break
				}
				room = lim - held[k]
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
				room--
				ready = append(ready, dispatch.NextAttempt(t.ID, t.TenantID, t.Queue, t.Priority, t.Attempt).
					WithNeed(resources.FromColumns(t.ResCpu, t.ResMemory, t.ResGpu, t.ResCustom)))
			}
			if full || !more || room <= 0 {
				break
			}
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

// heldOn reads the oldest tasks held on k after the task after (uuid.Nil:
// from the first), as many as room (at least one, at most maxPromote),
// or, on a first read, as many as the oldest's own limit leaves room for
// beside holders when that is more (tasks of several steps name one key
// with their own limits); more says the read was full (more may wait).
func (ap *applying) heldOn(ctx context.Context, k flowKey, room, holders int, after uuid.UUID) (rows []store.HeldOnKeyRow, more bool, err error) {
	n := min(max(room, 1), maxPromote)
	rows, err = ap.q.HeldOnKey(ctx, store.HeldOnKeyParams{TenantID: k.tenant, Key: k.key, After: after, N: int32(n)})
	if err != nil || len(rows) < n || after != uuid.Nil {
		return rows, len(rows) == n, err
	}
	if want := min(limitOn(rows[0].FlowKeys, rows[0].FlowLimits, k.key)-holders, maxPromote); want > n {
		rows, err = ap.q.HeldOnKey(ctx, store.HeldOnKeyParams{TenantID: k.tenant, Key: k.key, After: after, N: int32(want)})
		return rows, len(rows) == want, err
	}
	return rows, true, nil
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
			got, n, err := ap.lockKeys(ctx, []flowKey{o}, true)
			if err != nil || len(got) == 0 {
				return "", false, err
			}
			locked[o], held[o] = true, n[o]
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
	got, err := ap.promoteKeys(ctx, hints, true)
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
