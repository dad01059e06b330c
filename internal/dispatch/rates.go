package dispatch

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/internal/store"
)

// Step rate limits (docs/flow-control.md, "Rate limits"). A task of a
// step with rate_limit carries its key (the tenant's), its limit and its
// period; each admission of one of its attempts spends a token of the
// key's bucket, in the pass that admits it, so a pass that crashes spent
// nothing.
//
// A bucket is a theoretical arrival time (tat, the generic cell rate
// algorithm): with T = per/limit, a task may start when tat - per + T is
// not after now, and its start moves tat to max(tat, now) + T. A quiet
// bucket lets limit tasks start at once, then one every T.
//
// A task not lined up yet that finds no token is given its place in the
// key's line: ready_at (and rate_at) the time its token comes, its
// predecessor's interval after the last place a task waits in (the
// bucket's tail), so no pass looks at it before, a refused key's backlog
// is lined up a page at a time (no pass reads it again and again), and
// the tasks of a key start in the order they were lined up: while the
// line is ahead, a task not lined up yet goes behind it even if a token is
// free. A task whose place came and finds no token (the one before it
// started late, which moved the bucket's tat: with a limit of 1 there is
// no slack) is given the next token, in its line's order, before the
// places behind it: a late start delays the line by its lateness, not
// more. The tail is cut back, as a pass reads the bucket, to the last
// place a task still waits in, so tasks cancelled in line leave no empty
// line behind them. An admitted task keeps when it spent its token
// (rate_at); a retry is lined up again (its rate_at cleared).
//
// Locks: a pass tries each key's advisory lock ("rate/TENANT/VALUE", after
// the queue's row and the tenants' rows), waits for none (a key another
// admitter holds leaves its tasks for a later pass, as they are), and
// writes the bucket's row under it.

// rateLockPrefix starts the name of a rate key's advisory lock.
const rateLockPrefix = "rate/"

// rateKey is a key of a tenant.
type rateKey struct {
	tenant uuid.UUID
	key    string
}

func (k rateKey) lockName() string { return rateLockPrefix + k.tenant.String() + "/" + k.key }

// bucket is a key's bucket during a pass.
type bucket struct {
	locked bool      // this pass holds its lock (else its tasks wait, untouched)
	tat    time.Time // its theoretical arrival time
	tail   time.Time // the last place in its line a task waits in
	// refused: a task not lined up yet found no token, or came after the
	// line; the pass lines up the key's tasks not lined up yet.
	refused bool
	// late are tasks whose place came and found no token (a task before
	// them was admitted late): each is given the next token, in their
	// line's order, so a late start delays those behind it, not more.
	late    map[uuid.UUID]store.AdmissionCandidatesRow
	changed bool
}

// rates are the buckets a pass looked at.
type rates struct {
	now     time.Time // the database's, as the candidates were read
	buckets map[rateKey]*bucket
}

// interval is the time between two tokens of a limit of limit per perMs.
func interval(limit int32, perMs int64) time.Duration {
	return time.Duration(perMs) * time.Millisecond / time.Duration(max(limit, 1))
}

// allowedAt is when a task of limit per perMs may start in b: tat - per +
// T (GCRA).
func allowedAt(b *bucket, limit int32, perMs int64) time.Time {
	return b.tat.Add(interval(limit, perMs) - time.Duration(perMs)*time.Millisecond)
}

// nextToken is when a task of limit per perMs may start in b, from now
// on (a place: after now).
func (r *rates) nextToken(b *bucket, limit int32, perMs int64) time.Time {
	return later(allowedAt(b, limit, perMs), r.now.Add(time.Millisecond))
}

// load locks the keys of the candidates not looked at yet (those another
// transaction holds are left out), reads their buckets, and cuts a line
// ahead back to the last place a task still waits in.
func (r *rates) load(ctx context.Context, q *store.Queries, cands []store.AdmissionCandidatesRow) error {
	if r.buckets == nil {
		r.buckets = map[rateKey]*bucket{}
	}
	var names []string
	byName := map[string]rateKey{}
	for _, c := range cands {
		if r.now.IsZero() || c.Now.After(r.now) {
			r.now = c.Now
		}
		if c.RateKey == "" {
			continue
		}
		k := rateKey{c.TenantID, c.RateKey}
		if _, ok := r.buckets[k]; ok {
			continue
		}
		r.buckets[k] = &bucket{}
		names = append(names, k.lockName())
		byName[k.lockName()] = k
	}
	if len(names) == 0 {
		return nil
	}
	got, err := q.TryLockKeys(ctx, names)
	if err != nil {
		return err
	}
	p := store.RateBucketsParams{}
	for _, n := range got {
		k := byName[n]
		r.buckets[k] = &bucket{locked: true, tat: r.now, tail: r.now, late: map[uuid.UUID]store.AdmissionCandidatesRow{}}
		p.TenantIds = append(p.TenantIds, k.tenant)
		p.Keys = append(p.Keys, k.key)
	}
	rows, err := q.RateBuckets(ctx, p)
	if err != nil {
		return err
	}
	ahead := store.RateLineEndsParams{}
	for _, row := range rows {
		b := r.buckets[rateKey{row.TenantID, row.Key}]
		b.tat, b.tail = row.Tat, row.Tail
		if b.tail.After(r.now) {
			ahead.TenantIds = append(ahead.TenantIds, row.TenantID)
			ahead.Keys = append(ahead.Keys, row.Key)
		}
	}
	if len(ahead.Keys) == 0 {
		return nil
	}
	ends, err := q.RateLineEnds(ctx, ahead)
	if err != nil {
		return err
	}
	last := make(map[rateKey]time.Time, len(ends))
	for _, e := range ends {
		last[rateKey{e.TenantID, e.Key}] = e.Last
	}
	for i, key := range ahead.Keys {
		k := rateKey{ahead.TenantIds[i], key}
		if b := r.buckets[k]; last[k].Before(b.tail) { // (none waits: the zero time)
			b.tail, b.changed = later(last[k], r.now), true
		}
	}
	return nil
}

// token says whether a candidate may start now as its rate limit goes
// (always, without one); one refused is marked for its line.
func (r *rates) token(c store.AdmissionCandidatesRow) bool {
	if c.RateKey == "" {
		return true
	}
	b := r.buckets[rateKey{c.TenantID, c.RateKey}]
	if b == nil || !b.locked {
		return false
	}
	noToken := allowedAt(b, c.RateLimit, c.RatePerMs).After(r.now)
	switch lined := c.RateAt != nil; {
	case lined && noToken:
		b.late[c.ID] = c
	case lined:
		return true
	case noToken || b.tail.After(r.now): // a task not lined up goes behind the line
		b.refused = true
	default:
		return true
	}
	return false
}

// spend takes the token of a candidate admitted.
func (r *rates) spend(c store.AdmissionCandidatesRow) {
	if c.RateKey == "" {
		return
	}
	b := r.buckets[rateKey{c.TenantID, c.RateKey}]
	b.tat = later(b.tat, r.now).Add(interval(c.RateLimit, c.RatePerMs))
	b.changed = true
	delete(b.late, c.ID)
}

// maxLineUp bounds the tasks of one key a pass lines up.
const maxLineUp = 1000

// lineUp gives places (after the pass's admissions are marked): to each
// key's late tasks the next tokens, in their line's order; to the tasks
// of a key that refused one not lined up yet places after its line, each
// one interval (its predecessor's) after the last. It writes the buckets
// that changed, and returns how many tasks it placed and the first place
// given (zero: none).
func (r *rates) lineUp(ctx context.Context, q *store.Queries, queue string) (int, time.Time, error) {
	placed, first := 0, time.Time{}
	set := store.SetRateBucketsParams{}
	keys := slices.SortedFunc(maps.Keys(r.buckets), func(a, b rateKey) int {
		return cmp.Or(compareIDs(a.tenant, b.tenant), cmp.Compare(a.key, b.key))
	})
	for _, k := range keys {
		b := r.buckets[k]
		p := store.LineUpRatedParams{}
		// place gives task id (of limit per perMs) the place at, and
		// returns where the task after it may go.
		place := func(id uuid.UUID, at time.Time, limit int32, perMs int64) time.Time {
			p.Ids, p.Ats = append(p.Ids, id), append(p.Ats, at)
			if first.IsZero() || at.Before(first) {
				first = at
			}
			b.tail = later(b.tail, at)
			return at.Add(interval(limit, perMs))
		}
		late := slices.SortedFunc(maps.Values(b.late), func(x, y store.AdmissionCandidatesRow) int {
			return cmp.Or(x.RateAt.Compare(*y.RateAt), compareIDs(x.ID, y.ID))
		})
		var at time.Time
		for i, c := range late {
			if i == 0 {
				at = r.nextToken(b, c.RateLimit, c.RatePerMs)
			}
			at = place(c.ID, at, c.RateLimit, c.RatePerMs)
		}
		if b.refused {
			rows, err := q.RatedWaiting(ctx, store.RatedWaitingParams{TenantID: k.tenant, Key: k.key, Queue: queue, N: maxLineUp})
			if err != nil {
				return 0, time.Time{}, err
			}
			for i, t := range rows {
				if i == 0 {
					at = later(r.nextToken(b, t.RateLimit, t.RatePerMs), b.tail.Add(interval(t.RateLimit, t.RatePerMs)))
				}
				at = place(t.ID, at, t.RateLimit, t.RatePerMs)
			}
		}
		if len(p.Ids) > 0 {
			if err := q.LineUpRated(ctx, p); err != nil {
				return 0, time.Time{}, err
			}
			placed += len(p.Ids)
			b.changed = true
		}
		if b.changed {
			set.TenantIds = append(set.TenantIds, k.tenant)
			set.Keys = append(set.Keys, k.key)
			set.Tats = append(set.Tats, b.tat)
			set.Tails = append(set.Tails, b.tail)
		}
	}
	if len(set.Keys) == 0 {
		return placed, first, nil
	}
	return placed, first, q.SetRateBuckets(ctx, set)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
