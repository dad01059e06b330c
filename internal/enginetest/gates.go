package enginetest

import (
	"sync"
	"testing"
)

// Gates are channels by name that a test's handlers wait on and the test
// opens, each once. Those still shut when the test ends are opened, so
// that no handler outlives it.
type Gates struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// NewGates returns gates opened at t's end.
func NewGates(t testing.TB) *Gates {
	g := &Gates{m: map[string]chan struct{}{}}
	t.Cleanup(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, c := range g.m {
			select {
			case <-c:
			default:
				close(c)
			}
		}
	})
	return g
}

func (g *Gates) get(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m[name] == nil {
		g.m[name] = make(chan struct{})
	}
	return g.m[name]
}

// Wait is closed when the gate name opens.
func (g *Gates) Wait(name string) <-chan struct{} { return g.get(name) }

// Open opens the gate name (once: a second Open panics, as a second close).
func (g *Gates) Open(name string) { close(g.get(name)) }
