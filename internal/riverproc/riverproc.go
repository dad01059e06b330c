// Package riverproc is what every Orrery process that runs a River client
// shares, a worker's (engine/worker) and a gateway's (internal/gateway):
// the client's pool at READ COMMITTED, its start, the filter of River's
// routine logs, and the process's lease in workers.
package riverproc

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/store"
)

// BeatsPerTTL is how many heartbeats one lease TTL holds.
const BeatsPerTTL = 3

// ReadCommitted is a pool on p's database whose sessions run at READ
// COMMITTED whatever the database's default, for a River client (fetch,
// completion, maintenance, its notifier), which is written for it. Under
// SERIALIZABLE, River's fetch fails now and then (40001) and is tried
// again only at the next poll or insert notification: the wake-up of the
// job it was fetching for is lost until then. Orrery's own transactions
// stay on p, at the database's isolation. It holds at most 8 connections
// (River uses a handful: its notifier one for good); they are opened as
// River needs them.
func ReadCommitted(p *pgxpool.Pool) (*pgxpool.Pool, error) {
	cfg := p.Config().Copy()
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	cfg.MaxConns = min(cfg.MaxConns, 8)
	cfg.MinConns = 0
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// StartRiver starts the River client, again after a serialization
// failure (SERIALIZABLE databases: River's start writes its queue rows,
// and workers starting together collide), up to five tries.
func StartRiver(ctx context.Context, c *river.Client[pgx.Tx]) error {
	for try := 1; ; try++ {
		err := c.Start(context.WithoutCancel(ctx))
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "40001" || try == 5 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try) * 20 * time.Millisecond):
		}
	}
}

// RiverLogger is l for a River client: only its warnings and errors
// (River reports routine activity at info level every few seconds).
func RiverLogger(l *slog.Logger) *slog.Logger {
	return slog.New(atLeast{l.Handler(), slog.LevelWarn}).With("component", "river")
}

// atLeast passes on only records at or above min.
type atLeast struct {
	slog.Handler
	min slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(as []slog.Attr) slog.Handler {
	return atLeast{h.Handler.WithAttrs(as), h.min}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{h.Handler.WithGroup(name), h.min}
}

// RenewLease registers a River client of this process in workers (its
// queues, the tenants it is bound to, its capacity and how it holds
// command steps to it: "" when it runs none), or renews its lease for
// ttl: a worker's, or a gateway's.
func RenewLease(ctx context.Context, pool *pgxpool.Pool, id uuid.UUID, name string, queues map[string]int, tenants []string, capacity *resources.Vector, enforces string, ttl time.Duration) error {
	q, err := json.Marshal(queues)
	if err != nil {
		return err
	}
	t, err := json.Marshal(append([]string{}, tenants...))
	if err != nil {
		return err
	}
	p := store.HeartbeatWorkerParams{ID: id, Name: name, Queues: q, Tenants: t, TtlSeconds: ttl.Seconds()}
	p.CapCpu, p.CapMemory, p.CapGpu, p.CapCustom = store.CapacityColumns(capacity)
	if enforces != "" {
		p.Enforces = &enforces
	}
	return store.Retry(ctx, func() error {
		return store.New(pool).HeartbeatWorker(ctx, p)
	})
}
