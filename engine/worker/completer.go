package worker

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
	accepted, err := finishReports(ctx, w.cfg.StatePool, w.applier(), reports, func() {
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

// finishReports records a batch of reports in one transaction of its own
// (run.Applier.Finish); written is called when the batch is written,
// before it commits. A worker's reports and a gateway's (remote workers')
// go through it.
func finishReports(ctx context.Context, pool *pgxpool.Pool, a *run.Applier, reports []run.Report, written func()) ([]bool, error) {
	var accepted []bool
	err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if accepted, err = a.Finish(ctx, tx, reports); err != nil {
			return err
		}
		written()
		return nil
	})
	return accepted, err
}

// applier writes the ends of this worker's attempts.
func (w *Worker) applier() *run.Applier {
	return &run.Applier{Dispatcher: w.dispatcher, Metrics: w.cfg.Metrics, Failpoints: w.cfg.Failpoints}
}
