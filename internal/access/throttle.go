package access

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Cheap refusals: a burst of bad keys (guesses, a misconfigured client)
// costs the database little. Each failed verification is charged to its
// source (WithSource: the client's address), and a source past its
// allowance is refused with a *ThrottledError before anything is looked
// up (a key verified lately still passes: the cache answers it); a key
// that just failed is refused again from memory for a minute. Both tables
// are bounded.
const (
	// FailuresPerSource is how many failed verifications a source may
	// make at once; it earns one more each FailureRefill.
	FailuresPerSource = 20
	FailureRefill     = 3 * time.Second
	// badKeyTTL is how long a key that failed is refused from memory.
	badKeyTTL = time.Minute
	// maxThrottled bounds each table (sources, bad keys); a full table
	// starts again empty.
	maxThrottled = 10_000
)

// ThrottledError refuses a source that failed verification too often.
type ThrottledError struct{ RetryAfter time.Duration }

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("too many failed authentications from this address; retry in %s", e.RetryAfter.Round(time.Second))
}

type sourceKey struct{}

// WithSource records in ctx where a request came from (its client's IP
// address), which failed verifications are charged to.
func WithSource(ctx context.Context, source string) context.Context {
	return context.WithValue(ctx, sourceKey{}, source)
}

func sourceOf(ctx context.Context) string {
	s, _ := ctx.Value(sourceKey{}).(string)
	return s
}

// throttle holds the allowances of sources and the keys that failed.
type throttle struct {
	mu       sync.Mutex
	sources  map[string]*allowance
	overflow allowance                       // every source once sources is full: a flood of addresses shares one
	bad      map[[sha256.Size]byte]time.Time // when the key may be looked up again
}

type allowance struct {
	left float64
	at   time.Time
}

func newThrottle() *throttle {
	return &throttle{sources: map[string]*allowance{}, bad: map[[sha256.Size]byte]time.Time{},
		overflow: allowance{left: FailuresPerSource}}
}

// take reserves one failure of source's allowance for a lookup about to be
// made (refund gives it back when the lookup succeeds), or refuses the
// source when it has none left: concurrent lookups of one source cannot
// all pass one check. A source that is unknown ("": a handler served
// without api.WithClientSource) is not throttled.
func (t *throttle) take(source string, now time.Time) error {
	if source == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.allowanceOf(source, now)
	if a.left < 1 {
		return &ThrottledError{RetryAfter: time.Duration((1 - a.left) * float64(FailureRefill))}
	}
	a.left--
	return nil
}

// refund gives back what take reserved for a lookup that succeeded.
func (t *throttle) refund(source string, now time.Time) {
	if source == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.allowanceOf(source, now)
	a.left = min(a.left+1, FailuresPerSource)
}

// fail charges a failure made without a lookup (a malformed key, one that
// failed lately) to source.
func (t *throttle) fail(source string, now time.Time) {
	if source == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.allowanceOf(source, now)
	a.left = max(a.left-1, 0)
}

// remember records the key of hash h as failed.
func (t *throttle) remember(h [sha256.Size]byte, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.bad) >= maxThrottled {
		for k, until := range t.bad { // drop the lapsed; if none lapsed, start again
			if now.After(until) {
				delete(t.bad, k)
			}
		}
		if len(t.bad) >= maxThrottled {
			clear(t.bad)
		}
	}
	t.bad[h] = now.Add(badKeyTTL)
}

// knownBad reports whether the key of hash h failed within badKeyTTL.
func (t *throttle) knownBad(h [sha256.Size]byte, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.bad[h]
	if ok && now.After(until) {
		delete(t.bad, h)
		return false
	}
	return ok
}

// allowanceOf is source's allowance brought up to now: its own, or, once
// the table is full, the overflow shared by the sources not in it (sources
// back at a full allowance leave the table). Called with mu held.
func (t *throttle) allowanceOf(source string, now time.Time) *allowance {
	a := t.sources[source]
	if a == nil {
		if len(t.sources) >= maxThrottled {
			for k, b := range t.sources {
				if b.refilled(now) >= FailuresPerSource {
					delete(t.sources, k)
				}
			}
		}
		if len(t.sources) >= maxThrottled {
			a = &t.overflow
		} else {
			a = &allowance{left: FailuresPerSource, at: now}
			t.sources[source] = a
		}
	}
	a.left, a.at = a.refilled(now), now
	return a
}

// refilled is the allowance's failures left at now.
func (a *allowance) refilled(now time.Time) float64 {
	return min(FailuresPerSource, a.left+float64(now.Sub(a.at))/float64(FailureRefill))
}

// guardedRead looks up the key or session of hash h (read, through the
// cache m) for source: a hash in the cache answers whoever asks; else the
// source must have a failure left, a hash that failed lately is refused
// from memory, and a lookup that finds nothing is remembered.
func (k *Service) guardedRead(source string, m map[[sha256.Size]byte]cached, h [sha256.Size]byte, read func([sha256.Size]byte) (cached, error)) (cached, error) {
	now := time.Now()
	k.mu.Lock()
	c, ok := m[h]
	k.mu.Unlock()
	if ok && c.valid(now) {
		return c, nil
	}
	if k.throttle.knownBad(h, now) {
		k.throttle.fail(source, now)
		return cached{}, ErrUnauthenticated
	}
	if err := k.throttle.take(source, now); err != nil {
		return cached{}, err
	}
	c, err := k.cachedRead(m, h, read)
	switch {
	case errors.Is(err, ErrUnauthenticated):
		k.throttle.remember(h, now)
	case err == nil:
		k.throttle.refund(source, now)
	}
	return c, err
}
