// Package enginetest runs Orrery's engine in a test: a scheduler node and
// a worker pool in-process against a pgtest database, and polling helpers.
package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/gateway"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/store"
)

// StartNode runs a scheduler node (shards, scheduler, reaper) until t ends.
func StartNode(t testing.TB, pool *pgxpool.Pool) *node.Node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, _ := dispatch.New()
	n, err := node.New(ctx, node.Config{Pool: pool, Dispatcher: d, ShardTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

// StartWorker runs a worker pool serving queue "default" until t ends.
func StartWorker(t testing.TB, pool *pgxpool.Pool, concurrency int, handlers map[string]executor.HandlerFunc) {
	t.Helper()
	StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": concurrency}, Handlers: handlers})
}

// StartWorkers runs a worker with cfg (lease TTL 3 s unless set) until t ends.
func StartWorkers(t testing.TB, cfg worker.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 3 * time.Second
	}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// StartGateway runs a gateway for remote workers (lease TTL 3 s) until t
// ends.
func StartGateway(t testing.TB, pool *pgxpool.Pool) *gateway.Gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g, err := gateway.New(gateway.Config{StatePool: pool, LeaseTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return g
}

// WaitFor polls cond until it holds, failing t after within.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Int runs a query returning one integer.
func Int(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	// The test databases are serializable: a read beside the engine's
	// writes may fail with a serialization error, and is simply read again.
	err := store.Retry(context.Background(), func() error {
		return pool.QueryRow(context.Background(), sql, args...).Scan(&n)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// UUID runs a query returning one UUID.
func UUID(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
