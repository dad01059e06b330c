package api

import (
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
)

// keyRate is a token bucket per key: perSecond calls a second, bursts of
// as many; a call past it is ResourceExhausted with Retry-After. Bounded:
// past 10,000 keys it starts over. (Per process: n API processes allow a
// key n times the rate.)
type keyRate struct {
	perSecond float64
	what      string // the calls, as the error names them: "claims"
	whose     string // and whose: "with this key"
	mu        sync.Mutex
	buckets   map[uuid.UUID]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newKeyRate(perSecond int, what, whose string) *keyRate {
	return &keyRate{perSecond: float64(perSecond), what: what, whose: whose, buckets: map[uuid.UUID]*bucket{}}
}

func (k *keyRate) take(key uuid.UUID, now time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, ok := k.buckets[key]
	if !ok {
		if len(k.buckets) >= 10_000 {
			clear(k.buckets)
		}
		b = &bucket{tokens: k.perSecond, at: now}
		k.buckets[key] = b
	}
	b.tokens = min(k.perSecond, b.tokens+now.Sub(b.at).Seconds()*k.perSecond)
	b.at = now
	if b.tokens < 1 {
		ce := connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("more than %.0f %s a second %s", k.perSecond, k.what, k.whose))
		ce.Meta().Set("Retry-After", "1")
		return ce
	}
	b.tokens--
	return nil
}
