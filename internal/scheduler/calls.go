package scheduler

import (
	"context"

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
// one that fails alone is set aside (pendingStep), as fireDownstream's
// events are.
func (s *Scheduler) startCalls(ctx context.Context, leases []*shard.Lease, ids []int32) error {
	rooms := func(tenants []uuid.UUID) (usage.Rooms, error) {
		return usage.RunRooms(ctx, store.New(s.cfg.Pool), tenants)
	}
	step := pendingStep[uuid.UUID]{name: "job steps' calls", batch: callsBatch,
		some: func(ctx context.Context, shards []int32) (bool, error) {
			return store.New(s.cfg.Pool).HasCallStarts(ctx, shards)
		},
		take: func(ctx context.Context, leases []*shard.Lease, n int32) (int, []uuid.UUID, error) {
			var taken []uuid.UUID // (also when it fails: the calls it took)
			err := store.InRawTx(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
				held, err := s.cfg.Shards.Fence(ctx, tx, leases)
				if err != nil {
					return err
				}
				taken, err = s.applier().StartCalls(ctx, tx, shard.Shards(held), n, rooms)
				return err
			})
			return len(taken), taken, err
		},
		setAside: func(ctx context.Context, task uuid.UUID, err error) error {
			return store.New(s.cfg.Pool).SetAsideCallStart(ctx, store.SetAsideCallStartParams{TaskID: task, Error: executor.StorableError(err.Error())})
		}}
	return step.run(ctx, s.cfg.Logger, leases, ids)
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
