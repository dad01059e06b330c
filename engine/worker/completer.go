package worker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// startAttempts starts a batch of attempts in one statement.
func (w *Worker) startAttempts(ctx context.Context, starts []run.Start) ([]*run.Attempt, error) {
	var out []*run.Attempt
	err := store.InRawTx(ctx, w.cfg.StatePool, func(tx pgx.Tx) error {
		var err error
		out, err = run.StartAttempts(ctx, tx, starts, run.Worker{Name: w.cfg.Name, ID: w.id})
		return err
	})
	if err == nil {
		err = w.cfg.Failpoints.Err(FailpointStartCommitted)
	}
	return out, err
}

// finishAttempts records a batch of reports in one transaction
// (run.Applier.Finish).
func (w *Worker) finishAttempts(ctx context.Context, reports []run.Report) ([]bool, error) {
	return w.finish(ctx, reports, "")
}

// finish is finishAttempts, hitting the failpoint named (if any) when the
// batch is written, before it commits.
func (w *Worker) finish(ctx context.Context, reports []run.Report, written string) ([]bool, error) {
	accepted, err := w.applier().FinishInTx(ctx, w.cfg.StatePool, reports, func() {
		if written != "" {
			w.cfg.Failpoints.Hit(written)
		}
	})
	if err == nil {
		// The attempts that ended freed their slots: admit more.
		for _, q := range w.queueNames {
			w.dispatcher.Kick(q)
		}
	}
	return accepted, err
}

// applier writes the ends of this worker's attempts.
func (w *Worker) applier() *run.Applier {
	return &run.Applier{Dispatcher: w.dispatcher, Metrics: w.cfg.Metrics, Failpoints: w.cfg.Failpoints}
}
