package metrics

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/engine/dispatch"
	"github.com/orrery-dev/orrery/engine/store"
)

// WatchDatabase adds the gauges read from the databases at each scrape:
// orrery_queue_depth and orrery_queue_oldest_ready_seconds (River's ready
// jobs per queue, in the queue database) and orrery_dead_letters (per
// namespace, in the state database).
func (m *Metrics) WatchDatabase(state, queue *pgxpool.Pool) {
	if m == nil {
		return
	}
	m.Register(NewGaugeFunc("orrery_queue_depth", "Tasks handed to River and ready, not yet fetched by a worker, per queue.", "queue",
		func(ctx context.Context) (map[string]float64, error) {
			ds, err := dispatch.QueueDepths(ctx, queue)
			out := make(map[string]float64, len(ds))
			for q, d := range ds {
				out[q] = float64(d.Ready)
			}
			return out, err
		}))
	m.Register(NewGaugeFunc("orrery_queue_oldest_ready_seconds", "How long the oldest ready task of each queue has waited for a worker.", "queue",
		func(ctx context.Context) (map[string]float64, error) {
			ds, err := dispatch.QueueDepths(ctx, queue)
			out := make(map[string]float64, len(ds))
			for q, d := range ds {
				out[q] = d.OldestSeconds
			}
			return out, err
		}))
	m.Register(NewGaugeFunc("orrery_dead_letters", "Dead-lettered tasks waiting for a replay, per namespace.", "namespace",
		func(ctx context.Context) (map[string]float64, error) {
			rows, err := store.New(state).DeadLettersByNamespace(ctx)
			out := make(map[string]float64, len(rows))
			for _, r := range rows {
				out[r.Namespace] = float64(r.Dead)
			}
			return out, err
		}))
}
