package pgtest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/store"
)

// shared is the database the test binary's Tx transactions run on,
// copied from the template once.
var shared struct {
	once sync.Once
	pool *pgxpool.Pool
	err  error
}

// Tx begins a transaction on a database the test binary's tests share
// (migrated once) and rolls it back when t ends: nothing it writes is
// committed, and no database is copied for the test (as River's
// riverdbtest does). It suits tests of code that writes in its caller's
// transaction (run.Applier, dispatch.Dispatcher.Release); a test that needs
// commits, several connections or processes takes Pool.
//
// Transactions of tests running in parallel see none of each other's rows,
// but one waits on another's uncommitted unique keys until it rolls back:
// name what a test creates after the test (t.Name()).
func Tx(t testing.TB) pgx.Tx {
	t.Helper()
	shared.once.Do(func() {
		dsn, _, err := NewDatabase() // the cluster goes with the binary
		if err != nil {
			shared.err = err
			return
		}
		shared.pool, shared.err = store.Open(context.Background(), dsn, store.Options{})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	ctx := context.Background()
	tx, err := shared.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx
}
