package access

import (
	"context"
	"crypto/sha256"
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
	mu      sync.Mutex
	sources map[string]*allowance
	bad     map[[sha256.Size]byte]time.Time // when the key may be looked up again
}

type allowance struct {
	left float64
	at   time.Time
}

func newThrottle() *throttle {
	return &throttle{sources: map[string]*allowance{}, bad: map[[sha256.Size]byte]time.Time{}}
}

// check refuses a source with no failure left. A verification whose
// source is unknown ("": a handler served without api.WithClientSource)
// is not throttled.
func (t *throttle) check(source string, now time.Time) error {
	if source == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.refill(source, now)
	if a == nil || a.left >= 1 {
		return nil
	}
	return &ThrottledError{RetryAfter: time.Duration((1 - a.left) * float64(FailureRefill))}
}

// fail charges a failed verification to source and, when h is given,
// remembers the key that failed.
func (t *throttle) fail(source string, h *[sha256.Size]byte, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.refill(source, now)
	if a == nil && source != "" {
		if len(t.sources) >= maxThrottled {
			clear(t.sources)
		}
		a = &allowance{left: FailuresPerSource, at: now}
		t.sources[source] = a
	}
	if a != nil {
		a.left = max(a.left-1, 0)
	}
	if h != nil {
		if len(t.bad) >= maxThrottled {
			clear(t.bad)
		}
		t.bad[*h] = now.Add(badKeyTTL)
	}
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

// refill brings source's allowance up to now; nil when it has none on
// record (a full one). Called with mu held.
func (t *throttle) refill(source string, now time.Time) *allowance {
	a := t.sources[source]
	if a == nil {
		return nil
	}
	a.left = min(FailuresPerSource, a.left+float64(now.Sub(a.at))/float64(FailureRefill))
	a.at = now
	if a.left >= FailuresPerSource {
		delete(t.sources, source)
		return nil
	}
	return a
}
