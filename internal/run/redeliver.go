package run

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/store"
)

// Redeliver hands to River again the attempts that a worker fetched and
// never started: it died or stopped between River's fetch and
// StartAttempts, so the task is still queued or retrying at the attempt
// before, with no lease for the reaper to find, while River holds the
// job as running (River itself would rescue it only after an hour). Each
// such task gets a new River job for the same attempt; if the stopped
// worker comes back, StartAttempts lets only one of the two start it.
// Tasks that did start are left to their lease. It returns how many it
// redelivered.
func (a *Applier) Redeliver(ctx context.Context, tx pgx.Tx, fetched []dispatch.Fetched) (int, error) {
	if len(fetched) == 0 {
		return 0, nil
	}
	// The worker may hold two jobs for one task: an attempt it reported
	// (River had not marked its job done yet when the worker died) and the
	// retry it fetched next. Only the latest can be unstarted.
	latest := make(map[uuid.UUID]dispatch.Fetched, len(fetched))
	for _, f := range fetched {
		if l, dup := latest[f.TaskID]; !dup || f.Attempt > l.Attempt {
			latest[f.TaskID] = f
		}
	}
	p := store.UnstartedTasksParams{}
	for id, f := range latest {
		p.Ids = append(p.Ids, id)
		p.Attempts = append(p.Attempts, int32(f.Attempt))
	}
	rows, err := store.New(tx).UnstartedTasks(ctx, p)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	ready := make([]dispatch.Ready, len(rows))
	for i, t := range rows {
		f := latest[t.ID]
		ready[i] = dispatch.NextAttempt(t.ID, t.TenantID, t.Queue, t.Priority, t.Attempt)
		ready[i].Redelivers, ready[i].Reserve = f.JobID, f.Reserve // a large task's reservation goes with it
		if f.Need != nil {
			ready[i] = ready[i].WithNeed(*f.Need)
		}
	}
	return len(ready), a.Dispatcher.Release(ctx, tx, ready)
}
