package store_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/store"
)

// A relay's read of the outbox locks the rows it returns and no others
// (the oldest of the queues' candidates), so that a second relay of the
// same database takes the next ones.
func TestPendingOutboxLocksOnlyItsBatch(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO dispatch_outbox (id, task_id, tenant_id, queue, priority, attempt, created_at)
		SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), q, 1, 1, now() + (i * interval '1 ms')
		FROM unnest(ARRAY['a', 'b']) AS q, generate_series(1, 10) AS i`); err != nil {
		t.Fatal(err)
	}
	read := func() map[uuid.UUID]bool {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		rows, err := store.New(tx).PendingOutbox(ctx, store.PendingOutboxParams{Others: true, Queues: []string{}, Batch: 5})
		if err != nil {
			t.Fatal(err)
		}
		out := map[uuid.UUID]bool{}
		for _, r := range rows {
			out[r.ID] = true
		}
		return out
	}
	first := read()
	var free int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM dispatch_outbox FOR UPDATE SKIP LOCKED) AS s`).Scan(&free); err != nil {
		t.Fatal(err)
	}
	if len(first) != 5 || free != 15 {
		t.Fatalf("a batch of %d rows left %d of 20 unlocked; want 5 and 15", len(first), free)
	}
	second := read()
	for id := range second {
		if first[id] {
			t.Fatal("a second relay read a row the first holds")
		}
	}
	if len(second) != 5 {
		t.Fatalf("a second relay read %d rows; want the next 5", len(second))
	}
}
