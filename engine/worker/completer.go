package worker

import (
	"context"
	"slices"

	"github.com/google/uuid"
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

// finishAttempts records a batch of reports in one transaction: those on
// runs of one task in one statement, then the others one by one, taking
// their runs' locks in one order for every batch (by run id).
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

// finishReports records a batch of reports in one transaction: those on
// runs of one task in one statement; then, their runs locked in key
// order, the items of fan-outs together (run.FinishItemAttempts), and
// the others one by one; written is
// called when the batch is written, before it commits. A worker's reports
// and a gateway's (remote workers') go through it.
func finishReports(ctx context.Context, pool *pgxpool.Pool, a *run.Applier, reports []run.Report, written func()) ([]bool, error) {
	var sole, items, other []int
	var runs []uuid.UUID // of the items and the others: locked first, in key order
	for i, r := range reports {
		switch {
		case r.Shape != nil && r.Shape.SingleTask:
			sole = append(sole, i)
		case r.Shape != nil && r.Shape.Item && r.RunID != uuid.Nil:
			items = append(items, i)
			runs = append(runs, r.RunID)
		default:
			other = append(other, i)
			if r.RunID != uuid.Nil {
				runs = append(runs, r.RunID)
			}
		}
	}
	slices.SortFunc(other, func(a, b int) int {
		return slices.Compare(reports[a].RunID[:], reports[b].RunID[:])
	})
	pick := func(idx []int) []run.Report {
		out := make([]run.Report, len(idx))
		for k, i := range idx {
			out[k] = reports[i]
		}
		return out
	}
	soleReports, itemReports := pick(sole), pick(items)
	accepted := make([]bool, len(reports))
	err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		if len(sole) > 0 {
			ok, err := a.FinishSoleAttempts(ctx, tx, soleReports)
			if err != nil {
				return err
			}
			for k, i := range sole {
				accepted[i] = ok[k]
			}
		}
		if err := run.LockRuns(ctx, tx, runs); err != nil {
			return err
		}
		if len(items) > 0 {
			ok, err := a.FinishItemAttempts(ctx, tx, itemReports)
			if err != nil {
				return err
			}
			for k, i := range items {
				accepted[i] = ok[k]
			}
		}
		for _, i := range other {
			ok, err := a.FinishAttempt(ctx, tx, reports[i])
			if err != nil {
				return err
			}
			accepted[i] = ok
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
