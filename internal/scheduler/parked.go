package scheduler

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/shard"
)

// wakeParked ends the shards' parked steps that are due
// (run.Applier.WakeParked, docs/parked-steps.md), batch after batch while
// they come back full; a step whose transaction fails alone is put off
// by a minute (pendingStep).
func (s *Scheduler) wakeParked(ctx context.Context, leases []*shard.Lease, ids []int32) error {
	step := pendingStep[uuid.UUID]{name: "parked steps' wake", batch: callsBatch,
		some: func(ctx context.Context, shards []int32) (bool, error) {
			return store.New(s.cfg.Pool).HasDueParked(ctx, shards)
		},
		take: func(ctx context.Context, leases []*shard.Lease, n int32) (int, []uuid.UUID, error) {
			var taken []uuid.UUID // (also when it fails: the steps it took)
			err := store.InRawTx(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
				held, err := s.cfg.Shards.Fence(ctx, tx, leases)
				if err != nil {
					return err
				}
				taken, err = s.applier().WakeParked(ctx, tx, shard.Shards(held), n)
				return err
			})
			return len(taken), taken, err
		},
		setAside: func(ctx context.Context, task uuid.UUID, _ error) error {
			return store.New(s.cfg.Pool).SetAsideParked(ctx, task)
		}}
	return step.run(ctx, s.cfg.Logger, leases, ids)
}
