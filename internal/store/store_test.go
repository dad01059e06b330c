package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Two transactions each insert a row only if no such row exists yet (write
// skew). Under serializable isolation one of them fails, at a statement or
// at COMMIT; InTx must retry it as a new transaction, so that exactly one
// call reports that it inserted, and its row is the one stored. With
// crdbpgxv5.ExecuteTx on PostgreSQL the loser either exhausts its retries
// (savepoint rollback keeps the stale snapshot) or, when the failure comes
// at COMMIT, reports success for a transaction that was rolled back.
func TestInTxRetriesWriteSkewAndReportsCommitFailures(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	for round := range 20 {
		var bothRead sync.WaitGroup
		bothRead.Add(2)
		claimed := make([]bool, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				first := true
				err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
					claimed[i] = false
					var n int
					if err := tx.QueryRow(ctx, "SELECT count(*) FROM namespaces WHERE name LIKE 'skew-%'").Scan(&n); err != nil {
						return err
					}
					if first { // on the first attempt, both read before either writes
						first = false
						bothRead.Done()
						bothRead.Wait()
					}
					if n > 0 {
						return nil
					}
					_, err := tx.Exec(ctx, "INSERT INTO namespaces (tenant_id, name) VALUES ('00000000-0000-0000-0000-000000000001', $1)",
						[]string{"skew-a", "skew-b"}[i])
					claimed[i] = err == nil
					return err
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		var rows int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM namespaces WHERE name LIKE 'skew-%'").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if claims := btoi(claimed[0]) + btoi(claimed[1]); rows != 1 || claims != 1 {
			t.Fatalf("round %d: %d rows stored, %d calls claim to have inserted; want 1 and 1", round, rows, claims)
		}
		if _, err := pool.Exec(ctx, "DELETE FROM namespaces WHERE name LIKE 'skew-%'"); err != nil {
			t.Fatal(err)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A transaction whose session the server ends for idling inside it (a
// stopped or slow process, SQLSTATE 25P03) committed nothing, and runs
// again on another connection.
func TestInTxRunsAgainWhenTheServerEndsAnIdleTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := store.Open(ctx, pgtest.DSN(t), store.Options{IdleInTx: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tries := 0
	err = store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		tries++
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		if tries == 1 {
			time.Sleep(time.Second) // idle inside the transaction: the server ends the session
		}
		_, err := tx.Exec(ctx, "SELECT 2")
		return err
	})
	if err != nil || tries != 2 {
		t.Fatalf("InRawTx: %v after %d tries; want success on the second", err, tries)
	}
}
