package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/shard"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type node struct {
	m    *shard.Manager
	stop context.CancelFunc
	done chan struct{}
}

func startNode(t *testing.T, ctx context.Context, m *shard.Manager) *node {
	ctx, cancel := context.WithCancel(ctx)
	n := &node{m: m, stop: cancel, done: make(chan struct{})}
	go func() { defer close(n.done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-n.done })
	return n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestShardsSplitMoveAndFence(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	cfg := shard.Config{TTL: 2 * time.Second, Interval: 200 * time.Millisecond}
	ma, err := shard.NewManager(ctx, pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := shard.NewManager(ctx, pool, cfg)
	a := startNode(t, ctx, ma)
	waitFor(t, 5*time.Second, "one node owns all 64 shards", func() bool { return len(ma.Leases()) == 64 })

	b := startNode(t, ctx, mb)
	waitFor(t, 5*time.Second, "two nodes split the shards 32/32", func() bool {
		return len(ma.Leases()) == 32 && len(mb.Leases()) == 32
	})
	owners := map[int]int{}
	for _, l := range append(ma.Leases(), mb.Leases()...) {
		owners[l.Shard]++
	}
	if len(owners) != 64 {
		t.Fatalf("shards owned: %d distinct of 64", len(owners))
	}
	for s, n := range owners {
		if n != 1 {
			t.Fatalf("shard %d owned %d times", s, n)
		}
	}

	// A graceful stop hands the shards over at once.
	moved := mb.Leases()
	b.stop()
	<-b.done
	for _, l := range moved {
		select {
		case <-l.Done():
		default:
			t.Fatalf("stopped node still holds shard %d", l.Shard)
		}
	}
	waitFor(t, 3*time.Second, "the survivor owns all shards again", func() bool { return len(ma.Leases()) == 64 })
	for _, l := range ma.Leases() {
		if l.Shard == moved[0].Shard && l.Epoch <= moved[0].Epoch {
			t.Fatalf("shard %d re-claimed without a new epoch (%d, was %d)", l.Shard, l.Epoch, moved[0].Epoch)
		}
	}
	_ = a
}

// A node cut off from the database stops its shard work within half the
// TTL, and the others take its shards once its leases lapse.
func TestPartitionedNodeStopsAndIsReplaced(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	poolA, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	poolB, _ := pgxpool.New(ctx, dsn)
	t.Cleanup(poolB.Close)
	cfg := shard.Config{TTL: 2 * time.Second, Interval: 200 * time.Millisecond}
	ma, _ := shard.NewManager(ctx, poolA, cfg)
	startNode(t, ctx, ma)
	waitFor(t, 5*time.Second, "a owns all shards", func() bool { return len(ma.Leases()) == 64 })

	mb, _ := shard.NewManager(ctx, poolB, cfg)
	startNode(t, ctx, mb)
	waitFor(t, 5*time.Second, "b gets its half", func() bool { return len(mb.Leases()) == 32 })
	held := ma.Leases()

	poolA.Close() // a can no longer reach the database
	for _, l := range held {
		select {
		case <-l.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("a kept working on shard %d after losing the database", l.Shard)
		}
	}
	waitFor(t, 6*time.Second, "b takes over every shard", func() bool { return len(mb.Leases()) == 64 })
}
