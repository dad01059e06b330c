package worker

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/engine/dispatch"
	"github.com/orrery-dev/orrery/engine/run"
	"github.com/orrery-dev/orrery/engine/store"
)

// completer reports finished attempts in batches: one transaction, one
// commit, for every report that arrives while the previous batch commits
// (at most maxBatch), as River's own completer does for River jobs. Each
// report's consequences are the same as alone (run.FinishAttempt); if the
// batch's transaction fails, each report is retried in a transaction of
// its own, so one bad report cannot fail the others.
type completer struct {
	pool       *pgxpool.Pool
	dispatcher *dispatch.Dispatcher
	log        *slog.Logger
	in         chan pending
}

type pending struct {
	report run.Report
	runID  uuid.UUID
	done   chan result
}

type result struct {
	accepted bool
	err      error
}

const maxBatch = 100

func newCompleter(pool *pgxpool.Pool, d *dispatch.Dispatcher, log *slog.Logger) *completer {
	return &completer{pool: pool, dispatcher: d, log: log, in: make(chan pending, 4*maxBatch)}
}

// report hands one report to the completer and waits for its outcome.
func (c *completer) report(ctx context.Context, runID uuid.UUID, r run.Report) (bool, error) {
	p := pending{report: r, runID: runID, done: make(chan result, 1)}
	select {
	case c.in <- p:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case res := <-p.done:
		return res.accepted, res.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// run serves reports until stop is closed and the queue is drained.
func (c *completer) run(stop <-chan struct{}) {
	for {
		var batch []pending
		select {
		case p := <-c.in:
			batch = append(batch, p)
		case <-stop:
			return
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case p := <-c.in:
				batch = append(batch, p)
			default:
				break gather
			}
		}
		c.finish(batch)
	}
}

func (c *completer) finish(batch []pending) {
	// One lock order for every batch: the runs, by id.
	slices.SortFunc(batch, func(a, b pending) int { return slices.Compare(a.runID[:], b.runID[:]) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	accepted := make([]bool, len(batch))
	err := store.InRawTx(ctx, c.pool, func(tx pgx.Tx) error {
		for i, p := range batch {
			ok, err := run.FinishAttempt(ctx, tx, c.dispatcher, p.report)
			if err != nil {
				return err
			}
			accepted[i] = ok
		}
		return nil
	})
	if err == nil || len(batch) == 1 {
		for i, p := range batch {
			p.done <- result{accepted: accepted[i], err: err}
		}
		return
	}
	c.log.Warn("batched report failed; reporting one by one", "reports", len(batch), "err", err)
	for _, p := range batch {
		c.finish([]pending{p})
	}
}
