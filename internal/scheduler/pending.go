package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
	"github.com/orrery-dev/orrery/shard"
)

// A pendingStep is a step of the scheduler that turns pending rows of its
// shards into runs (the ends of upstream runs, published events), in
// fenced transactions of at most batch rows each, batch after batch.
type pendingStep[K any] struct {
	name  string // for the log
	batch int32
	// partial: a batch may come back short while rows remain (the events
	// step's turns by tenant): the step goes on while batches take
	// anything, at most maxPendingBatches a pass; otherwise while they
	// come back full.
	partial bool
	// some probes whether the shards have rows to take, before any
	// transaction.
	some func(ctx context.Context, shards []int32) (bool, error)
	// take is one transaction taking at most n rows: how many it took,
	// and which (also when it failed).
	take func(ctx context.Context, leases []*shard.Lease, n int32) (int, []K, error)
	// setAside puts off a row whose transaction failed alone, with its
	// error, so that it holds up no other of its shard.
	setAside func(ctx context.Context, key K, err error) error
}

// run takes the shards' rows, batch after batch while they come back full
// (a backlog is not left to age into lateness). After a batch fails, it
// takes them one per transaction, and sets aside each that fails alone.
func (p pendingStep[K]) run(ctx context.Context, log *slog.Logger, leases []*shard.Lease, ids []int32) error {
	some, err := p.some(ctx, ids)
	if err != nil || !some {
		return err
	}
	for range maxPendingBatches {
		taken, _, err := p.take(ctx, leases, p.batch)
		switch {
		case err != nil && !errors.Is(err, shard.ErrLost) && ctx.Err() == nil:
			return p.alone(ctx, log, leases, err)
		case err != nil || ctx.Err() != nil || taken == 0 || !p.partial && taken < int(p.batch):
			return err
		}
	}
	return nil // the next pass goes on
}

// maxPendingBatches bounds the batches of one pending step in a pass, so
// that the pass goes back to the due instants.
const maxPendingBatches = 100

func (p pendingStep[K]) alone(ctx context.Context, log *slog.Logger, leases []*shard.Lease, cause error) error {
	log.Warn("a batch of the "+p.name+" failed; its rows are taken one at a time", "err", cause)
	for range p.batch {
		taken, keys, err := p.take(ctx, leases, 1)
		switch {
		case err == nil && taken == 0:
			return nil
		case err == nil:
			continue
		case errors.Is(err, shard.ErrLost) || ctx.Err() != nil || len(keys) == 0:
			return err
		}
		log.Error("a row of the "+p.name+" failed alone; set aside, to be tried again", "row", keys[0], "err", err)
		if err := p.setAside(ctx, keys[0], err); err != nil {
			return err
		}
	}
	return nil
}

// startRuns writes, in a pending step's transaction, the runs it planned
// and the cancels their overlap policies asked for: the trees' counts
// first (before any run's lock, as StartCalls takes them), then the
// cancels, then the runs. A run whose instant another step took
// meanwhile fails the transaction: the step starts again.
func (s *Scheduler) startRuns(ctx context.Context, tx pgx.Tx, q *store.Queries, news []run.New, cancel []uuid.UUID) error {
	if err := s.applier().HoldToTrees(ctx, q, news); err != nil {
		return err
	}
	if _, err := s.applier().Cancel(ctx, tx, cancel, lifecycle.ReasonCancelledByNewer); err != nil {
		return err
	}
	rooms, err := usage.RunRooms(ctx, store.New(s.cfg.Pool), run.TenantsOf(news))
	if err != nil {
		return err
	}
	written, err := s.applier().Insert(ctx, tx, news, &run.Firer{Node: s.cfg.Shards.NodeID()}, rooms)
	if err != nil {
		return err
	}
	for i, id := range written {
		if id == uuid.Nil {
			return fmt.Errorf("run of job %s at %s: the instant was taken meanwhile", news[i].Job.ID, news[i].At.Format(time.RFC3339Nano))
		}
	}
	return nil
}
