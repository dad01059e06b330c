package shard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/shard"
)

// A partly lost fence returns the leases still held, drops the lost ones
// from the Manager at once, and a fence with none held is a *LostError.
func TestFenceRule(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	m, err := shard.NewManager(ctx, pool, shard.Config{TTL: time.Hour, Interval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	startNode(t, ctx, m)
	waitFor(t, 5*time.Second, "the node owns all 64 shards", func() bool { return len(m.Leases()) == 64 })
	leases := m.Leases()[:3]

	fence := func(leases []*shard.Lease) ([]*shard.Lease, error) {
		var held []*shard.Lease
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			held, err = m.Fence(ctx, tx, leases)
			return err
		})
		return held, err
	}
	if held, err := fence(leases); err != nil || len(held) != 3 {
		t.Fatalf("all held: %d %v", len(held), err)
	}

	// Another node claimed the second shard: a new epoch.
	if _, err := pool.Exec(ctx, "UPDATE shards SET epoch = epoch + 1 WHERE id = $1", leases[1].Shard); err != nil {
		t.Fatal(err)
	}
	held, err := fence(leases)
	if err != nil || len(held) != 2 || held[0] != leases[0] || held[1] != leases[2] {
		t.Fatalf("partly lost: %v %v", held, err)
	}
	select {
	case <-leases[1].Done():
	default:
		t.Fatal("the lost lease is still the Manager's")
	}

	// None held: a *LostError naming them, which is ErrLost.
	if _, err := pool.Exec(ctx, "UPDATE shards SET lease_expires_at = now() - interval '1 second' WHERE id = ANY($1)",
		[]int32{int32(leases[0].Shard), int32(leases[2].Shard)}); err != nil {
		t.Fatal(err)
	}
	held, err = fence([]*shard.Lease{leases[0], leases[2]})
	var lost *shard.LostError
	if !errors.Is(err, shard.ErrLost) || !errors.As(err, &lost) || len(lost.Leases) != 2 || held != nil {
		t.Fatalf("all lost: %v %v", held, err)
	}
}
