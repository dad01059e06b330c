package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every request is answered with its own result, in batches of at most
// MaxBatch; a batch that fails is served again request by request, so only
// the bad request fails; the lanes end once nothing waits.
func TestBatcher(t *testing.T) {
	var batches, largest atomic.Int32
	gate := make(chan struct{})
	b := New("test", slog.New(slog.DiscardHandler), func(_ context.Context, reqs []int) ([]string, error) {
		<-gate // the first batches wait, so that the rest queue up behind them
		batches.Add(1)
		for {
			l := largest.Load()
			if int32(len(reqs)) <= l || largest.CompareAndSwap(l, int32(len(reqs))) {
				break
			}
		}
		out := make([]string, len(reqs))
		for i, r := range reqs {
			if r == 13 {
				return nil, errors.New("13 is bad")
			}
			out[i] = fmt.Sprint(r * 2)
		}
		return out, nil
	})
	const n = 1000
	var wg sync.WaitGroup
	errs := make([]error, n)
	got := make([]string, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = b.Do(context.Background(), i) })
	}
	// Let the queue fill while the lanes hold their first batches.
	for len(b.in) < cap(b.in) {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	for i := range n {
		switch {
		case i == 13 && (errs[i] == nil || errs[i].Error() != "13 is bad"):
			t.Fatalf("request 13: err %v, want its own failure", errs[i])
		case i != 13 && (errs[i] != nil || got[i] != fmt.Sprint(i*2)):
			t.Fatalf("request %d: %q, %v", i, got[i], errs[i])
		}
	}
	if l := largest.Load(); l > MaxBatch || l < 2 {
		t.Fatalf("largest batch %d: want between 2 and %d", l, MaxBatch)
	}
	if batches.Load() >= n {
		t.Fatalf("%d batches for %d requests: nothing was batched", batches.Load(), n)
	}
	for deadline := time.Now().Add(10 * time.Second); b.running.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d lanes still running with nothing to serve", b.running.Load())
		}
	}
}

// A request whose caller gave up while it waited for a lane is not
// served; the others are.
func TestBatcherSkipsAbandonedRequests(t *testing.T) {
	gate, entered := make(chan struct{}), make(chan struct{})
	var served sync.Map
	b := New("test", slog.New(slog.DiscardHandler), func(_ context.Context, reqs []int) ([]int, error) {
		if reqs[0] < 0 {
			entered <- struct{}{}
			<-gate // hold this lane
		}
		for _, r := range reqs {
			served.Store(r, true)
		}
		return reqs, nil
	})
	// Every lane holds a batch, one after the other.
	var wg sync.WaitGroup
	for i := range lanes {
		wg.Go(func() { _, _ = b.Do(context.Background(), -1-i) })
		<-entered
	}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { _, err := b.Do(ctx, 1); gaveUp <- err }()
	for len(b.in) < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned request: %v", err)
	}
	kept := make(chan error, 1)
	go func() { _, err := b.Do(context.Background(), 2); kept <- err }()
	for len(b.in) < 2 {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	if _, ok := served.Load(1); ok {
		t.Fatal("the abandoned request was served")
	}
	if _, ok := served.Load(2); !ok {
		t.Fatal("the request behind it was not served")
	}
}

// Wait returns once no batch is being served, even one whose caller gave
// up while it was written.
func TestWaitOutlastsAbandonedBatches(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var served atomic.Bool
	b := New("test", slog.New(slog.DiscardHandler), func(_ context.Context, reqs []int) ([]int, error) {
		close(entered)
		<-release
		served.Store(true)
		return reqs, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := b.Do(ctx, 1); done <- err }()
	<-entered
	cancel() // the caller gives up while its batch is written
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v, want the caller's cancellation", err)
	}
	waited := make(chan struct{})
	go func() { b.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while a batch was being served")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-waited
	if !served.Load() {
		t.Fatal("Wait returned before the batch was served")
	}
}
