package run

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/store"
)

// Attempts whose worker's lease lapsed end as lease_expired (the reaper).

// LeaseExpired is the result of an attempt whose lease lapsed.
func LeaseExpired(why string) executor.Result {
	return executor.Result{ExitReason: executor.ReasonLeaseExpired, FailureClass: executor.ClassSystem, Retryable: true, Error: why}
}

// ExpireLeases fails the running attempts whose lease lapsed (their worker
// died or stalled) as lease_expired: each task's fencing token moves on, so
// the old worker's late report is rejected, and the task retries or is
// dead-lettered as any failure would. It returns how many it expired.
func (a *Applier) ExpireLeases(ctx context.Context, tx pgx.Tx, batch int) (int, error) {
	rows, err := store.New(tx).ExpiredLeases(ctx, int32(batch))
	if err != nil {
		return 0, err
	}
	seen := make(map[uuid.UUID]bool, len(rows))
	var reports []Report
	for _, t := range rows {
		if seen[t.ID] { // both its worker's lease and its own lapsed
			continue
		}
		seen[t.ID] = true
		res := LeaseExpired("the worker stopped renewing the task's lease")
		if t.PastDeadline {
			res = executor.Result{ExitReason: executor.ReasonTimeout, FailureClass: executor.ClassUser, Retryable: true,
				Error: "the attempt ran past its step's timeout on a remote worker"}
		}
		reports = append(reports, Report{TaskID: t.ID, FencingToken: t.FencingToken, Expired: true, Result: res})
	}
	if _, err := a.Finish(ctx, tx, reports); err != nil {
		return 0, err
	}
	return len(reports), nil
}

// retryAt is when the next attempt of a task may start: after the step's
// backoff, or at once after a lapsed lease. The lease TTL has already been
// waited then, and a River job scheduled in the future waits for River's
// leader to promote it (every 5 s, and a new leader first when the dead
// worker was the leader: 18 s measured), not for its instant.
