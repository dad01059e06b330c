package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/orrery-dev/orrery/internal/store"
)

// BenchmarkRelayPastBacklog measures one relay read (PendingOutbox, in a
// transaction rolled back) of a queue database's rows while another queue
// database's queue holds a backlog of 200,000 outbox rows (its database
// down): the relay of a named queue ("a", 200 rows) and the default
// database's relay (every queue but the backlogged one's).
func BenchmarkRelayPastBacklog(b *testing.B) {
	pool := freshDB(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO dispatch_outbox (id, task_id, tenant_id, queue, priority, attempt, created_at)
		SELECT gen_random_uuid(), gen_random_uuid(), '00000000-0000-0000-0000-000000000001',
		       CASE WHEN g % 1000 = 0 THEN 'a' ELSE 'backlog' END, 1, 1, now() - g * interval '1 ms'
		FROM generate_series(1, 200000) AS g`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE dispatch_outbox"); err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name   string
		params store.PendingOutboxParams
	}{
		{"queue=a", store.PendingOutboxParams{Queues: []string{"a"}, Batch: 500}},
		{"others", store.PendingOutboxParams{Others: true, Queues: []string{"backlog"}, Batch: 500}},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				rows, err := store.New(tx).PendingOutbox(ctx, v.params)
				_ = tx.Rollback(ctx)
				if err != nil || len(rows) != 200 {
					b.Fatal(fmt.Sprint(len(rows), " rows, ", err))
				}
			}
		})
	}
}
