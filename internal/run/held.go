package run

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/store"
)

// Runs held back by overlap: queue start when their job's active run ends;
// runs held for their concurrency keys, when a run of their key ends
// (promoteKeyed).

// promoteQueued starts the job's run that overlap: queue held back. A
// firing transaction that saw the finishing run as active may be holding
// one back at this very moment, not yet visible here (READ COMMITTED);
// PromoteStranded, run by the reaper, starts such a run.
//
// ended are the concurrency keys of the run whose end this is (none: the
// reaper's look, or a run without keys): the runs queued for them start
// first (promoteKeyed). It returns how many runs it started.
func (ap *applying) promoteQueued(ctx context.Context, jobID uuid.UUID, ended []string) (int, error) {
	if n, keyed, err := ap.promoteKeyed(ctx, jobID, ended); keyed || err != nil {
		return n, err // runs held for their concurrency keys start by their keys
	}
	next, err := ap.q.PromoteQueuedRun(ctx, jobID)
	if store.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return 1, ap.releaseRoots(ctx, next)
}

// releaseRoots releases the root tasks of runs that start (promoted from
// queued).
func (ap *applying) releaseRoots(ctx context.Context, runs ...uuid.UUID) error {
	for _, id := range runs {
		roots, err := ap.q.RootTasks(ctx, id)
		if err != nil {
			return err
		}
		cands := make([]candidate, len(roots))
		for i, t := range roots {
			// (a run retried while its key was full has made attempts)
			cands[i] = candidate{dispatch.NextAttempt(t.ID, t.TenantID, t.Queue, t.Priority, t.Attempt), t.RunID, t.Step, t.Conditional, t.FanOut, t.JobStep}
		}
		if err := ap.release(ctx, cands); err != nil {
			return err
		}
	}
	return nil
}

// PromoteStranded starts, for up to batch jobs after the job after (in id
// order; uuid.Nil: from the first), the runs held back by overlap: queue
// while no run of the job is active any more, and by concurrency keys
// that have room (see promoteQueued). It returns the job to go on after
// (uuid.Nil when it looked at the last: round robin, so that jobs whose
// runs wait on full keys keep no other job from its look) and how many
// runs it started.
func (a *Applier) PromoteStranded(ctx context.Context, tx pgx.Tx, after uuid.UUID, batch int) (uuid.UUID, int, error) {
	ap := a.in(tx)
	jobs, err := ap.q.JobsWithStrandedQueuedRuns(ctx, store.JobsWithStrandedQueuedRunsParams{After: after, Batch: int32(batch)})
	if err != nil {
		return uuid.Nil, 0, err
	}
	started := 0
	for _, j := range jobs {
		n, err := ap.promoteQueued(ctx, j, nil)
		if err != nil {
			return uuid.Nil, 0, err
		}
		started += n
	}
	next := uuid.Nil
	if len(jobs) == batch {
		next = jobs[len(jobs)-1]
	}
	return next, started, nil
}
