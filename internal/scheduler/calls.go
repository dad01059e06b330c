package scheduler

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
	"github.com/orrery-dev/orrery/shard"
)

// callsBatch is how many calls (job steps' child runs to start) and how
// many pending cancels one transaction takes.
const callsBatch int32 = 100

// startCalls starts the child runs of the job steps that call the shards'
// jobs (run.Applier.StartCalls), batch after batch while they come back
// full; when a batch fails, its calls are taken one per transaction and
// one that fails alone is set aside, as fireDownstream's events are.
func (s *Scheduler) startCalls(ctx context.Context, leases []*shard.Lease, ids []int32) error {
	some, err := store.New(s.cfg.Pool).HasCallStarts(ctx, ids)
	if err != nil || !some {
		return err
	}
	rooms := func(tenants []uuid.UUID) (usage.Rooms, error) {
		return usage.RunRooms(ctx, store.New(s.cfg.Pool), tenants)
	}
	batch := func(n int32) ([]uuid.UUID, error) {
		var taken []uuid.UUID
		err := store.InRawTx(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
			held, err := s.cfg.Shards.Fence(ctx, tx, leases)
			if err != nil {
				return err
			}
			taken, err = s.applier().StartCalls(ctx, tx, shard.Shards(held), n, rooms)
			return err
		})
		return taken, err
	}
	for {
		taken, err := batch(callsBatch)
		switch {
		case err != nil && !errors.Is(err, shard.ErrLost) && ctx.Err() == nil:
			return s.callsAlone(ctx, batch, err)
		case err != nil || len(taken) < int(callsBatch) || ctx.Err() != nil:
			return err
		}
	}
}

// callsAlone takes calls one per transaction after a batch of them
// failed; one that fails alone is set aside (put off by 2^tries seconds,
// at most 10 minutes, its error kept), so that it holds up no other.
func (s *Scheduler) callsAlone(ctx context.Context, batch func(int32) ([]uuid.UUID, error), cause error) error {
	s.cfg.Logger.Warn("a batch of job steps' calls failed; its calls are taken one at a time", "err", cause)
	for range callsBatch {
		taken, err := batch(1)
		switch {
		case err == nil && len(taken) == 0:
			return nil
		case err == nil:
			continue
		case errors.Is(err, shard.ErrLost) || ctx.Err() != nil || len(taken) == 0:
			return err
		}
		s.cfg.Logger.Error("a job step's call failed alone; set aside, to be tried again", "task", taken[0], "err", err)
		if err := store.New(s.cfg.Pool).SetAsideCallStart(ctx, store.SetAsideCallStartParams{TaskID: taken[0], Error: executor.StorableError(err.Error())}); err != nil {
			return err
		}
	}
	return nil
}

// cancelsPerPass bounds the batches of pending cancels one pass takes:
// a tree of 10,000 runs cancelled is cancelled at about 1,000 runs a
// second, paced so that the work of other tenants goes on beside it.
const cancelsPerPass = 2

// cancelPending cancels the shards' runs that cancels left for later
// (run.Applier.CancelPending), batch after batch while they come back
// full, at most cancelsPerPass batches.
func (s *Scheduler) cancelPending(ctx context.Context, leases []*shard.Lease, ids []int32) error {
	some, err := store.New(s.cfg.Pool).HasRunCancels(ctx, ids)
	if err != nil || !some {
		return err
	}
	for range cancelsPerPass {
		var taken int
		err := store.InRawTx(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
			held, err := s.cfg.Shards.Fence(ctx, tx, leases)
			if err != nil {
				return err
			}
			taken, err = s.applier().CancelPending(ctx, tx, shard.Shards(held), callsBatch)
			return err
		})
		if err != nil || taken < int(callsBatch) || ctx.Err() != nil {
			return err
		}
	}
	return nil
}
