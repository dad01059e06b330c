package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// ErrCannotRetry: the run did not end as failed, dead-lettered or
// cancelled, or the job's overlap policy holds the retry back.
var ErrCannotRetry = errors.New("run cannot be retried")

// RetryRun runs a finished run that failed or was cancelled again from
// where it failed (lifecycle.Retry): its succeeded and skipped tasks keep
// their ends and outputs, every other task runs again after its parents
// that do, with its attempt numbers going on. The job's overlap policy
// applies as to a manual trigger, unless ignoreOverlap: skip and queue
// refuse the retry while another run is active (ErrCannotRetry naming
// the policy), cancel_previous cancels the active runs. Audited.
func (s *Service) RetryRun(ctx context.Context, a job.Actor, id uuid.UUID, ignoreOverlap bool) (*Run, error) {
	apply := s.applier()
	var out Run
	err := store.InRawTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := store.New(tx)
		// Lock first, then read: a retry of the same run that committed
		// meanwhile is seen (the run is running again).
		if _, err := q.LockRun(ctx, id); err != nil && !store.IsNotFound(err) {
			return err
		}
		r, err := q.GetRun(ctx, store.GetRunParams{TenantID: a.Tenant, ID: id})
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		before := fromGetRow(r)
		if j, err := q.GetJob(ctx, store.GetJobParams{TenantID: a.Tenant, ID: r.JobID}); err != nil {
			return err
		} else if j.Status == job.StatusDeleted {
			return fmt.Errorf("%w: %s/%s", job.ErrDeleted, r.Namespace, r.JobName)
		}
		if !before.Status.AcceptsRetry() {
			return fmt.Errorf("%w: it is %s; only a failed, dead-lettered or cancelled run is retried", ErrCannotRetry, before.Status)
		}
		if !ignoreOverlap {
			if err := s.retryOverlap(ctx, tx, apply, r.JobID, r.JobVersion); err != nil {
				return err
			}
		}
		if err := retryGraph(ctx, tx, apply, a, before, r.Namespace+"/"+r.JobName, false); err != nil {
			return err
		}
		// The answer is the run as the retry left it (read after the
		// commit, it might have run to its end already).
		now, err := q.GetRun(ctx, store.GetRunParams{TenantID: a.Tenant, ID: id})
		out = fromGetRow(now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// retryGraph runs the finished run before again from where it failed, in
// tx (the run's row locked, its retry allowed): its tasks reset and
// released as lifecycle.Retry says, audited as action retry by a. With
// all, it runs the run again from the start instead (lifecycle.Rerun: a
// run that succeeded too), audited as action rerun. A run of a
// concurrency key at its limit is written queued for it instead, its
// tasks released when a run of the key ends.
func retryGraph(ctx context.Context, tx pgx.Tx, apply *Applier, a job.Actor, before Run, jobName string, all bool) error {
	q := store.New(tx)
	id := before.ID
	rows, err := q.RunGraphs(ctx, []uuid.UUID{id})
	if err != nil {
		return err
	}
	// The graph of steps: a fan-out's items are its group's to run again
	// (expand, when the group is released).
	rows = slices.DeleteFunc(rows, func(t store.RunGraphsRow) bool { return t.GroupID != nil })
	graph := make([]lifecycle.GraphTask, len(rows))
	byID := make(map[uuid.UUID]store.RunGraphsRow, len(rows))
	for i, t := range rows {
		byID[t.ID] = t
		graph[i] = lifecycle.GraphTask{ID: t.ID, Status: t.Status, Rule: t.TriggerRule, ParentsRemaining: int(t.ParentsRemaining), Parents: t.Parents}
	}
	p, reopen, action := lifecycle.Retry(before.Status, graph), q.RetryRun, "retry"
	if all {
		p, reopen, action = lifecycle.Rerun(before.Status, graph), q.RerunRun, "rerun"
	}
	// Its concurrency keys are held again once it runs (a finished run
	// holds none): at a full key, it is queued for them, its tasks to run
	// again left waiting for the promotion that starts it (their release:
	// RootTasks).
	ap := apply.in(tx)
	full, err := ap.fullKey(ctx, []uuid.UUID{id})
	if err != nil {
		return err
	}
	queued := full != "" && len(p.Release) > 0
	if queued {
		_, err = q.QueueRetriedRun(ctx, store.QueueRetriedRunParams{ID: id, Reason: full, Rerun: all})
	} else {
		_, err = reopen(ctx, id)
	}
	if store.IsNotFound(err) {
		return fmt.Errorf("%w: it is no longer finished", ErrCannotRetry)
	} else if err != nil {
		return err
	}
	reset := store.RetryTasksParams{}
	for tid, n := range p.Wait {
		reset.Ids = append(reset.Ids, tid)
		reset.Remaining = append(reset.Remaining, int32(n))
	}
	var cands []candidate
	for _, tid := range append(p.Release, p.Skip...) {
		reset.Ids = append(reset.Ids, tid)
		reset.Remaining = append(reset.Remaining, 0)
	}
	for _, tid := range p.Release {
		t := byID[tid]
		cands = append(cands, candidate{dispatch.NextAttempt(tid, t.TenantID, t.Queue, t.Priority, t.Attempt), t.RunID, t.Step, t.Conditional, t.FanOut, t.JobStep})
	}
	if all {
		err = q.RerunTasks(ctx, store.RerunTasksParams(reset))
	} else {
		err = q.RetryTasks(ctx, reset)
	}
	if err != nil {
		return err
	}
	if len(p.Skip) > 0 {
		skip := store.SkipTasksParams{Ids: p.Skip, Reasons: make([]string, len(p.Skip))}
		for i := range skip.Reasons {
			skip.Reasons[i] = ReasonParentSkipped
		}
		if _, err := q.SkipTasks(ctx, skip); err != nil {
			return err
		}
	}
	after, _ := json.Marshal(map[string]any{"run": before.ID, "tasks": len(reset.Ids)})
	if err := q.InsertRunAudit(ctx, store.InsertRunAuditParams{
		ID: uuid.Must(uuid.NewV7()), TenantID: a.Tenant, Actor: a.Name, Action: action, TargetKind: "run",
		TargetID: id, TargetName: jobName, Before: mustMarshal(before), After: after,
	}); err != nil {
		return err
	}
	if queued {
		return nil
	}
	if err := ap.release(ctx, cands); err != nil {
		return err
	}
	// Every task to run again may have been skipped, or failed its
	// condition: the run may be over already.
	return ap.finishRun(ctx, id, false)
}

// retryOverlap applies the job's overlap policy to a retry, as to a
// manual trigger: a run that would be skipped or held back is refused,
// and cancel_previous cancels the active runs.
func (s *Service) retryOverlap(ctx context.Context, tx pgx.Tx, apply *Applier, jobID uuid.UUID, version int64) error {
	q := store.New(tx)
	spec, err := specs.get(ctx, tx, jobID, version)
	if err != nil {
		return err
	}
	if !spec.WeighsActiveRuns() { // overlap: allow reads none
		return nil
	}
	active, err := q.ActiveRuns(ctx, []uuid.UUID{jobID})
	if err != nil || len(active) == 0 {
		return err
	}
	statuses := make([]lifecycle.RunStatus, len(active))
	ids := make([]uuid.UUID, len(active))
	for i, r := range active {
		statuses[i], ids[i] = r.Status, r.ID
	}
	d := lifecycle.NewOverlap(spec.Overlap, statuses).Next()
	switch {
	case d.CancelPrevious:
		_, err := apply.Cancel(ctx, tx, ids, lifecycle.ReasonCancelledByTrigger)
		return err
	case d.Status != lifecycle.RunPending:
		return fmt.Errorf("%w: the job's overlap policy %s holds it back while run %s is %s (retry with ignore_overlap to run both)",
			ErrCannotRetry, spec.Overlap, active[0].ID, active[0].Status)
	}
	return nil
}

func mustMarshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
