// Package reaper gives every task whose worker died or stopped a way out:
// lapsed task leases end as lease_expired, fetched-but-never-started River
// jobs of a lapsed worker go out again, and runs that overlap: queue held
// back while nothing of their job runs start. Every scheduler node runs
// one (internal/node).
package reaper

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// Reaper gives every task whose worker died or stopped a way out, every
// Interval:
//
//   - a running task whose lease lapsed has its attempt failed as
//     lease_expired, so it retries with a new fencing token (or is
//     dead-lettered);
//   - a task whose River job a worker fetched but never started (the worker
//     died between River's fetch and the attempt's start: the task is still
//     queued or retrying, and has no lease) is delivered again once that
//     worker's own lease lapses;
//   - a run that overlap: queue holds back while its job has no active run
//     any more (a firing transaction held it back while the active run's
//     report was committing) is started;
//   - a task held on a step's concurrency key that has room (the promotion
//     at a holder's end passed it by: its row, or its other key's lock,
//     was another transaction's) is released, a batch of keys a pass,
//     round robin (docs/flow-control.md).
//
// The first two are bounded by the worker's lease TTL plus one Interval after the
// failure. Every scheduler node runs a reaper; SKIP LOCKED and fencing
// tokens keep them apart.
type Reaper struct {
	cfg Config
	// keys is where the next look at tasks held on step keys goes on
	// from (promoteHeldKeys).
	keys run.KeyCursor
	// stranded is the job the look at held-back runs goes on after.
	stranded uuid.UUID
}

// Config configures a Reaper.
type Config struct {
	Pool       *pgxpool.Pool
	Dispatcher *dispatch.Dispatcher
	// Interval between passes; default 1 s.
	Interval time.Duration
	// Batch is how many lapsed leases one transaction fails; default 100.
	Batch  int
	Logger *slog.Logger
	// Metrics records lease expirations and the runs they finish; nil: none.
	Metrics *metrics.Metrics
}

func (c *Config) withDefaults() error {
	switch {
	case c.Pool == nil:
		return errors.New("reaper: Config.Pool is required")
	case c.Dispatcher == nil:
		return errors.New("reaper: Config.Dispatcher is required")
	case c.Interval < 0 || c.Batch < 0:
		return errors.New("reaper: Config.Interval and Batch must not be negative")
	}
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Batch == 0 {
		c.Batch = 100
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// forgetEvery is how many passes go between two deletions of workers gone
// for more than a day: nothing needs them sooner.
const forgetEvery = 300

// NewReaper returns a Reaper; Run starts it.
func New(cfg Config) (*Reaper, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return &Reaper{cfg: cfg}, nil
}

// Run reaps until ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for pass := 1; ; pass++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if pass%forgetEvery == 0 {
			if err := store.New(r.cfg.Pool).ForgetOldWorkers(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.Error("forget old workers", "err", err)
			}
		}
		if err := r.expireLeases(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("expire task leases", "err", err)
		}
		if err := r.sweepLapsedWorkers(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("redeliver what lapsed workers fetched", "err", err)
		}
		if err := r.promoteStranded(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("start held-back runs", "err", err)
		}
		if err := r.promoteHeldKeys(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("release tasks held on step keys", "err", err)
		}
		// Rate limits' buckets that are full and have no line are as if
		// they did not exist (internal/dispatch/rates.go).
		if _, err := store.New(r.cfg.Pool).SweepRateBuckets(ctx, int32(r.cfg.Batch)); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("sweep rate limits' buckets", "err", err)
		}
	}
}

// promoteHeldKeys releases tasks held on step keys that have room (a
// promotion passed them by: their row or another key's lock was another
// transaction's), a batch of keys a pass, round robin by key.
func (r *Reaper) promoteHeldKeys(ctx context.Context) error {
	var n int
	var next run.KeyCursor
	err := store.InRawTx(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		var err error
		next, n, err = r.applier().PromoteHeldKeys(ctx, tx, r.keys, r.cfg.Batch)
		return err
	})
	if err != nil {
		return err
	}
	r.keys = next
	if n > 0 {
		r.cfg.Logger.Info("tasks held on step keys released (a promotion passed them by)", "count", n)
	}
	return nil
}

// expireLeases fails lapsed task leases, a batch per transaction, until
// none is left.
func (r *Reaper) expireLeases(ctx context.Context) error {
	for {
		var n int
		err := store.InRawTx(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
			var err error
			n, err = r.applier().ExpireLeases(ctx, tx, r.cfg.Batch)
			return err
		})
		if err != nil {
			return err
		}
		r.cfg.Metrics.LeaseExpirations(n)
		if n > 0 {
			r.cfg.Logger.Warn("task leases expired; attempts failed as lease_expired", "count", n)
		}
		if n < r.cfg.Batch {
			return nil
		}
	}
}

// promoteStranded starts held-back runs (overlap: queue) whose job has no
// active run any more, and runs queued for concurrency keys that have
// room, a batch of jobs a pass, round robin by job.
func (r *Reaper) promoteStranded(ctx context.Context) error {
	var n int
	var next uuid.UUID
	err := store.InRawTx(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		var err error
		next, n, err = r.applier().PromoteStranded(ctx, tx, r.stranded, r.cfg.Batch)
		return err
	})
	if err == nil {
		r.stranded = next
	}
	if n > 0 {
		r.cfg.Logger.Info("held-back runs started (their previous run ended while they were being queued)", "count", n)
	}
	return err
}

// sweepLapsedWorkers redelivers what lapsed workers fetched and never
// started, one worker per transaction: claiming the worker (marking it
// swept) and redelivering its tasks commit together. A worker whose sweep
// fails (its queue database does not answer) stays to sweep at the next
// pass, and the pass goes on with the others; it returns the first error.
func (r *Reaper) sweepLapsedWorkers(ctx context.Context) error {
	skip := []uuid.UUID{}
	var first error
	for {
		var name string
		var id uuid.UUID
		var n int
		err := store.InRawTx(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
			q := store.New(tx)
			w, err := q.ClaimLapsedWorker(ctx, skip)
			if store.IsNotFound(err) {
				name = ""
				return nil
			}
			if err != nil {
				return err
			}
			name, id = w.Name, w.ID
			var served map[string]int // as the worker wrote it: {"queue": slots}
			_ = json.Unmarshal(w.Queues, &served)
			fetched, err := r.cfg.Dispatcher.FetchedBy(ctx, tx, w.ID.String(), slices.Collect(maps.Keys(served)))
			if err != nil {
				return err
			}
			n, err = r.applier().Redeliver(ctx, tx, fetched)
			return err
		})
		if name == "" || ctx.Err() != nil {
			return cmp.Or(first, err)
		}
		if err != nil {
			first = cmp.Or(first, fmt.Errorf("worker %s: %w", name, err))
			skip = append(skip, id)
			continue
		}
		if n > 0 {
			r.cfg.Logger.Warn("worker lease lapsed; tasks it fetched but never started were delivered again", "worker", name, "count", n)
		}
	}
}

// applier writes the reaper's transitions.
func (r *Reaper) applier() *run.Applier {
	return &run.Applier{Dispatcher: r.cfg.Dispatcher, Metrics: r.cfg.Metrics}
}
