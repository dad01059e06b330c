package worker

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag/resources"
)

func cpu(m int64) resources.Vector { return resources.Vector{CPU: m} }

// acquireAsync starts an acquire and answers when it is granted.
func acquireAsync(g *gate, need resources.Vector) (granted chan func()) {
	granted = make(chan func(), 1)
	go func() {
		release, err := g.acquire(context.Background(), need, false)
		if err == nil {
			granted <- release
		}
	}()
	return granted
}

func waitGrant(t *testing.T, ch chan func(), what string) func() {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not granted", what)
		return nil
	}
}

func notGranted(t *testing.T, ch chan func(), what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: granted", what)
	case <-time.After(50 * time.Millisecond):
	}
}

// What runs at once never passes the capacity; a small attempt that fits
// passes a larger waiting one (backfill) until that one has waited its
// reservation, after which nothing passes it until it has started.
func TestGate(t *testing.T) {
	g := newGate(cpu(1000))
	g.reserve = time.Hour
	a := waitGrant(t, acquireAsync(g, cpu(600)), "600 of 1000 free")
	big := acquireAsync(g, cpu(600))
	notGranted(t, big, "600 with 400 free")
	small := waitGrant(t, acquireAsync(g, cpu(300)), "300 with 400 free, passing the waiting 600")
	if used := g.inUse(); used.CPU != 900 {
		t.Fatalf("in use %v", used)
	}
	a()
	b := waitGrant(t, big, "600 once the first 600 ended")
	small()
	b()
	if used := g.inUse(); !used.IsZero() {
		t.Fatalf("in use after all ended: %v", used)
	}

	// The reservation: once the large one has waited, a small one that
	// would fit waits behind it.
	g = newGate(cpu(1000))
	g.reserve = 20 * time.Millisecond
	a = waitGrant(t, acquireAsync(g, cpu(500)), "500")
	big = acquireAsync(g, cpu(800))
	for reserved := false; !reserved; time.Sleep(5 * time.Millisecond) { // its timer fired
		g.mu.Lock()
		reserved = len(g.waiting) == 1 && g.waiting[0].reserved
		g.mu.Unlock()
	}
	small2 := acquireAsync(g, cpu(300))
	notGranted(t, small2, "300 behind a reserved 800")
	a()
	b = waitGrant(t, big, "the reserved 800 once the 500 ended")
	notGranted(t, small2, "300 beside 800 of 1000")
	b()
	waitGrant(t, small2, "300 once the 800 ended")()

	// One admission already held back room for (it waited its
	// reservation there) holds its room here from the start.
	g = newGate(cpu(1000))
	g.reserve = time.Hour
	a = waitGrant(t, acquireAsync(g, cpu(500)), "500")
	reservedBig := make(chan func(), 1)
	go func() {
		if release, err := g.acquire(context.Background(), cpu(800), true); err == nil {
			reservedBig <- release
		}
	}()
	for waiting := false; !waiting; time.Sleep(5 * time.Millisecond) {
		g.mu.Lock()
		waiting = len(g.waiting) == 1
		g.mu.Unlock()
	}
	small3 := acquireAsync(g, cpu(300))
	notGranted(t, small3, "300 behind an 800 reserved from the start")
	a()
	waitGrant(t, reservedBig, "the reserved 800 once the 500 ended")()
	waitGrant(t, small3, "300 once the 800 ended")()

	// A waiter that gives up leaves no trace.
	g = newGate(cpu(1000))
	hold := waitGrant(t, acquireAsync(g, cpu(1000)), "all of it")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := g.acquire(ctx, cpu(1), false); done <- err }()
	for waiting := false; !waiting; time.Sleep(5 * time.Millisecond) {
		g.mu.Lock()
		waiting = len(g.waiting) == 1
		g.mu.Unlock()
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled wait was granted")
	}
	hold()
	if used := g.inUse(); !used.IsZero() || len(g.waiting) != 0 {
		t.Fatalf("after a cancelled wait: in use %v, %d waiting", used, len(g.waiting))
	}
	if !g.fits(cpu(1000)) || g.fits(cpu(1001)) {
		t.Error("fits")
	}
}
