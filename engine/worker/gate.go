package worker

import (
	"context"
	"sync"
	"time"

	"github.com/orrery-dev/orrery/dag/resources"
)

// gate holds back the attempts whose resources do not fit what this
// worker's running attempts leave of its capacity (docs/resources.md):
// whatever admission hands it, the attempts it runs at once never ask for
// more than it has. A waiting attempt that fits goes as soon as room frees
// (small ones backfill around a larger one); once the oldest waiting one
// has waited reserveAfter, it holds the room it needs: nothing passes it
// until it has started, so a large attempt never starves behind small
// ones. (A timer marks it: no clock is read.)
type gate struct {
	capacity resources.Vector
	reserve  time.Duration // reserveAfter; shorter in tests
	mu       sync.Mutex
	used     resources.Vector
	waiting  []*gateWaiter // oldest first
}

type gateWaiter struct {
	need     resources.Vector
	reserved bool          // it has waited reserveAfter (set by timer, under mu)
	timer    *time.Timer   // sets reserved (nil: reserved from the start)
	ok       chan struct{} // closed when its room is taken for it
}

// reserveAfter is how long the oldest waiting attempt lets others pass it.
const reserveAfter = 10 * time.Second

func newGate(capacity resources.Vector) *gate {
	return &gate{capacity: capacity, reserve: reserveAfter}
}

// fits reports whether need could ever run here (it fits the capacity).
func (g *gate) fits(need resources.Vector) bool { return need.FitsIn(g.capacity) }

// acquire waits until need fits the room left and takes it; release gives
// it back. It returns ctx's error if ctx ends first. need must fit the
// capacity (fits). With reserveNow (the task already waited its admission
// reservation) it holds its room from the start.
func (g *gate) acquire(ctx context.Context, need resources.Vector, reserveNow bool) (release func(), err error) {
	release = func() { g.release(need) }
	if need.IsZero() {
		return func() {}, nil
	}
	g.mu.Lock()
	w := &gateWaiter{need: need, ok: make(chan struct{}), reserved: reserveNow}
	if !reserveNow {
		w.timer = time.AfterFunc(g.reserve, func() {
			g.mu.Lock()
			w.reserved = true
			g.mu.Unlock()
		})
		defer w.timer.Stop()
	}
	g.waiting = append(g.waiting, w)
	g.grant()
	g.mu.Unlock()
	select {
	case <-w.ok:
		return release, nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		select {
		case <-w.ok: // granted meanwhile: give it back
			g.used = g.used.Sub(need)
			g.grant()
		default:
			g.remove(w)
			g.grant() // a reservation it held is gone
		}
		return nil, ctx.Err()
	}
}

func (g *gate) release(need resources.Vector) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.used = g.used.Sub(need)
	g.grant()
}

// grant gives room to the waiting attempts that fit, oldest first; an
// attempt that has waited reserveAfter and does not fit keeps the rest
// waiting (its reservation). Called with mu held.
func (g *gate) grant() {
	for i := 0; i < len(g.waiting); {
		w := g.waiting[i]
		if g.used.Add(w.need).FitsIn(g.capacity) {
			g.used = g.used.Add(w.need)
			close(w.ok)
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			continue
		}
		if w.reserved {
			return
		}
		i++
	}
}

func (g *gate) remove(w *gateWaiter) {
	for i, x := range g.waiting {
		if x == w {
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			return
		}
	}
}

// inUse is what the attempts let through ask for together.
func (g *gate) inUse() resources.Vector {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.used
}
