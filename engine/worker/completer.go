package worker

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/engine/run"
	"github.com/orrery-dev/orrery/engine/store"
)

// startAttempts starts a batch of attempts in one statement.
func (w *Worker) startAttempts(ctx context.Context, starts []run.Start) ([]*run.Attempt, error) {
	var out []*run.Attempt
	err := store.InRawTx(ctx, w.cfg.StatePool, func(tx pgx.Tx) error {
		var err error
		out, err = run.StartAttempts(ctx, tx, starts, w.cfg.Name, w.cfg.LeaseTTL)
		return err
	})
	return out, err
}

// finishAttempts records a batch of reports in one transaction, taking the
// runs' locks in one order for every batch (by run id).
func (w *Worker) finishAttempts(ctx context.Context, reports []run.Report) ([]bool, error) {
	order := make([]int, len(reports))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return slices.Compare(reports[a].RunID[:], reports[b].RunID[:])
	})
	accepted := make([]bool, len(reports))
	err := store.InRawTx(ctx, w.cfg.StatePool, func(tx pgx.Tx) error {
		for _, i := range order {
			ok, err := run.FinishAttempt(ctx, tx, w.dispatcher, reports[i])
			if err != nil {
				return err
			}
			accepted[i] = ok
		}
		return nil
	})
	return accepted, err
}
