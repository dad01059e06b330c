package dispatch

import (
	"context"
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
// A task refused a token is given its place in the key's line: ready_at
// (and rate_at) the time its token comes, one T after the last place
// given (the bucket's tail), so no pass looks at it before, a refused
// key's backlog is lined up a page at a time (no pass reads it again and
// again), and the tasks of a key start in the order they were lined up:
// while the tail is ahead, a task not lined up yet is lined up behind it
// even if a token is free. A task whose place came and finds no token
// (the key's tokens went to a step of another limit, or a retry's
// backoff ended into a free token) is lined up again, behind the line.
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
	tail   time.Time // the last place in its line given
	// refused is the interval of a task refused (0: none refused): the
	// pass lines up the key's waiting tasks after it admits; all of them
	// when one found no token (noToken), else (a task refused only for
	// coming after the line) those not lined up yet, so a task whose
	// place came keeps it.
	refused time.Duration
	per     time.Duration // the period of the task refused
	noToken bool
	changed bool
}

// rates are the buckets a pass looked at.
type rates struct {
	now     time.Time // the database's, as the candidates were read
	buckets map[rateKey]*bucket
}

// interval is the time between two tokens of the task's limit.
func interval(c store.AdmissionCandidatesRow) time.Duration {
	return time.Duration(c.RatePerMs) * time.Millisecond / time.Duration(max(c.RateLimit, 1))
}

// load locks the keys of the candidates not looked at yet (those another
// transaction holds are left out) and reads their buckets.
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
		r.buckets[k] = &bucket{locked: true, tat: r.now, tail: r.now}
		p.TenantIds = append(p.TenantIds, k.tenant)
		p.Keys = append(p.Keys, k.key)
	}
	rows, err := q.RateBuckets(ctx, p)
	for _, row := range rows {
		b := r.buckets[rateKey{row.TenantID, row.Key}]
		b.tat, b.tail = row.Tat, row.Tail
	}
	return err
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
	t, per := interval(c), time.Duration(c.RatePerMs)*time.Millisecond
	noToken := b.tat.Add(t - per).After(r.now)
	if behind := c.RateAt == nil && b.tail.After(r.now); !noToken && !behind {
		return true
	}
	b.refused, b.per, b.noToken = t, per, b.noToken || noToken
	return false
}

// spend takes the token of a candidate admitted.
func (r *rates) spend(c store.AdmissionCandidatesRow) {
	if c.RateKey == "" {
		return
	}
	b := r.buckets[rateKey{c.TenantID, c.RateKey}]
	b.tat = later(b.tat, r.now).Add(interval(c))
	b.changed = true
}

// maxLineUp bounds the tasks of one key a pass lines up.
const maxLineUp = 1000

// lineUp gives the waiting tasks of each key that refused one their
// places in its line (after the pass's admissions are marked), writes
// the buckets that changed, and returns how many tasks it lined up and
// the first place given (zero: none).
func (r *rates) lineUp(ctx context.Context, q *store.Queries, queue string) (int, time.Time, error) {
	lined, first := 0, time.Time{}
	set := store.SetRateBucketsParams{}
	for k, b := range r.buckets {
		if b.refused > 0 {
			ids, err := q.RatedWaiting(ctx, store.RatedWaitingParams{TenantID: k.tenant, Key: k.key, Queue: queue, UnlinedOnly: !b.noToken, N: maxLineUp})
			if err != nil {
				return 0, time.Time{}, err
			}
			if len(ids) > 0 {
				// The next token after this pass's, and after the line.
				at := later(b.tat.Add(b.refused-b.per), b.tail.Add(b.refused))
				at = later(at, r.now.Add(time.Millisecond))
				if first.IsZero() || at.Before(first) {
					first = at
				}
				p := store.LineUpRatedParams{Ids: ids}
				for range ids {
					p.Ats = append(p.Ats, at)
					b.tail = at
					at = at.Add(b.refused)
				}
				if err := q.LineUpRated(ctx, p); err != nil {
					return 0, time.Time{}, err
				}
				lined += len(ids)
				b.changed = true
			}
		}
		if b.changed {
			set.TenantIds = append(set.TenantIds, k.tenant)
			set.Keys = append(set.Keys, k.key)
			set.Tats = append(set.Tats, b.tat)
			set.Tails = append(set.Tails, b.tail)
		}
	}
	if len(set.Keys) == 0 {
		return lined, first, nil
	}
	return lined, first, q.SetRateBuckets(ctx, set)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
