package scheduler

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/shard"
)

// FailpointDebounceTx is hit inside the transaction that starts due
// debounced runs, once it has decided them, before it commits.
const FailpointDebounceTx = "scheduler/debounce-tx"

// fireDebounced starts the shards' debounced runs that are due
// (run.Applier.FireDebounced, docs/flow-control.md "Debounce"), in fenced
// transactions, batch after batch while they come back full: a crash
// anywhere leaves them due for the next owner of the shard. A run whose
// transaction fails alone is put off by a minute (pendingStep).
func (s *Scheduler) fireDebounced(ctx context.Context, leases []*shard.Lease, ids []int32) error {
	step := pendingStep[uuid.UUID]{name: "debounce step", batch: callsBatch,
		some: func(ctx context.Context, shards []int32) (bool, error) {
			return store.New(s.cfg.Pool).HasDueDebounces(ctx, shards)
		},
		take: func(ctx context.Context, leases []*shard.Lease, n int32) (int, []uuid.UUID, error) {
			var taken []uuid.UUID // (also when it fails: the runs it took)
			err := store.InRawTx(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
				held, err := s.cfg.Shards.Fence(ctx, tx, leases)
				if err != nil {
					return err
				}
				taken, err = s.applier().FireDebounced(ctx, tx, shard.Shards(held), n)
				if err == nil && len(taken) > 0 {
					s.cfg.Failpoints.Hit(FailpointDebounceTx)
				}
				return err
			})
			return len(taken), taken, err
		},
		setAside: func(ctx context.Context, id uuid.UUID, _ error) error {
			return store.New(s.cfg.Pool).SetAsideDebounce(ctx, id)
		}}
	return step.run(ctx, s.cfg.Logger, leases, ids)
}
