package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/engine/dispatch"
	"github.com/orrery-dev/orrery/engine/run"
	"github.com/orrery-dev/orrery/engine/store"
)

// Reaper finds running tasks whose lease lapsed and fails their attempts
// as lease_expired, so the tasks retry with a new fencing token. Every
// scheduler node runs one; SKIP LOCKED keeps them apart.
type Reaper struct {
	Pool       *pgxpool.Pool
	Dispatcher *dispatch.Dispatcher
	Interval   time.Duration // default 1 s
	Logger     *slog.Logger
}

// Run reaps until ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	interval := r.Interval
	if interval == 0 {
		interval = time.Second
	}
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for {
			var n int
			err := store.InRawTx(ctx, r.Pool, func(tx pgx.Tx) error {
				var err error
				n, err = run.ExpireLeases(ctx, tx, r.Dispatcher, 100)
				return err
			})
			if err != nil {
				if ctx.Err() == nil {
					log.Error("expire task leases", "err", err)
				}
				break
			}
			if n > 0 {
				log.Warn("task leases expired; attempts failed as lease_expired", "count", n)
			}
			if n < 100 {
				break
			}
		}
	}
}
