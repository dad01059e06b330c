package run

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// MaxReplay is the most dead letters one replay of a job's takes.
const MaxReplay = 10_000

// maxReplayTasks bounds the tasks one replay transaction reads (the graphs
// of the runs it replays in); a run larger than that goes alone.
const maxReplayTasks = 50_000

// ReplayDeadLetters gives dead-lettered tasks one more attempt each: the
// tasks go back in line, their runs reopen, and their descendants wait
// again as lifecycle.Replay derives. Dead letters of a cancelled run are
// not replayed. With no ids, every dead letter of jobRef (or of the
// tenant) is replayed, up to limit. It returns the tasks replayed. Runs are
// replayed in transactions of at most maxReplayTasks tasks of graph: an
// error (or a crash) partway leaves those committed replayed, and asking
// again replays the rest (a replayed task is no dead letter any more).
func (s *Service) ReplayDeadLetters(ctx context.Context, a job.Actor, ids []uuid.UUID, jobRef job.Ref, limit int) ([]uuid.UUID, error) {
	if limit < 0 || limit > MaxReplay {
		return nil, &dag.FieldError{Field: "limit", Message: fmt.Sprintf("%d is outside 0..%d (0: up to %d)", limit, MaxReplay, MaxReplay)}
	}
	if len(ids) == 0 {
		if limit == 0 {
			limit = MaxReplay
		}
		jobID, err := s.jobID(ctx, a, jobRef)
		if err != nil {
			return nil, err
		}
		for before, _ := decodeRunToken(""); len(ids) < limit; {
			page, next, err := s.deadLetters(ctx, a, jobID, job.MaxPageSize, before)
			if err != nil {
				return nil, err
			}
			for _, d := range page {
				ids = append(ids, d.ID)
			}
			if next == "" {
				break
			}
			if before, err = decodeRunToken(next); err != nil {
				return nil, err
			}
		}
		if len(ids) > limit {
			ids = ids[:limit]
		}
	}
	// The runs of the dead letters, read before: each transaction below
	// replays in runs whose graphs together stay within maxReplayTasks.
	runs, err := store.New(s.pool).DeadLetterRuns(ctx, store.DeadLetterRunsParams{TenantID: a.Tenant, Ids: ids})
	if err != nil {
		return nil, err
	}
	var replayed []uuid.UUID
	for len(runs) > 0 {
		n, size := 0, int64(0)
		for n < len(runs) && (n == 0 || size+runs[n].Tasks <= maxReplayTasks) {
			size += runs[n].Tasks
			n++
		}
		done, err := s.replayRuns(ctx, a, runs[:n])
		replayed = append(replayed, done...)
		if err != nil {
			return replayed, err
		}
		runs = runs[n:]
	}
	return replayed, nil
}

// replayRuns replays dead letters of some runs in one transaction: lock
// the runs, read their graphs, decide (lifecycle.Replay), write.
func (s *Service) replayRuns(ctx context.Context, a job.Actor, runs []store.DeadLetterRunsRow) ([]uuid.UUID, error) {
	runIDs := make([]uuid.UUID, len(runs))
	asked := make(map[uuid.UUID][]uuid.UUID, len(runs))
	for i, r := range runs {
		runIDs[i] = r.RunID
		asked[r.RunID] = r.TaskIds
	}
	var replayed []uuid.UUID
	apply := s.applier()
	err := store.InRawTx(ctx, s.pool, func(tx pgx.Tx) error {
		replayed = replayed[:0]
		q := store.New(tx)
		locked, err := q.LockRunsForReplay(ctx, runIDs)
		if err != nil {
			return err
		}
		rows, err := q.RunGraphs(ctx, runIDs)
		if err != nil {
			return err
		}
		graphs := make(map[uuid.UUID][]lifecycle.GraphTask, len(runIDs))
		byID := make(map[uuid.UUID]store.RunGraphsRow, len(rows))
		for _, t := range rows {
			byID[t.ID] = t
			graphs[t.RunID] = append(graphs[t.RunID], lifecycle.GraphTask{
				ID: t.ID, Status: t.Status, Rule: t.TriggerRule, ParentsRemaining: int(t.ParentsRemaining), Parents: t.Parents})
		}
		var queue, reopen []uuid.UUID
		wait := store.WaitAgainParams{}
		skip := store.SkipTasksParams{}
		var revived []candidate
		for _, r := range locked {
			p := lifecycle.Replay(r.Status, graphs[r.ID], asked[r.ID])
			queue = append(queue, p.Queue...)
			if p.ReopenRun {
				reopen = append(reopen, r.ID)
			}
			for id, n := range p.Wait {
				wait.Ids = append(wait.Ids, id)
				wait.Remaining = append(wait.Remaining, int32(n))
			}
			for _, id := range p.Release { // waiting first, then released
				t := byID[id]
				wait.Ids = append(wait.Ids, id)
				wait.Remaining = append(wait.Remaining, 0)
				revived = append(revived, candidate{dispatch.NextAttempt(id, t.TenantID, t.Queue, t.Priority, t.Attempt), t.RunID, t.Step, t.Conditional, t.FanOut, t.JobStep})
			}
			for _, id := range p.Skip {
				skip.Ids = append(skip.Ids, id)
				skip.Reasons = append(skip.Reasons, ReasonParentSkipped)
			}
		}
		if len(queue) == 0 {
			return nil
		}
		back, err := q.ReplayTasks(ctx, store.ReplayTasksParams{TenantID: a.Tenant, Ids: queue})
		if err != nil {
			return err
		}
		var ready []dispatch.Ready
		for _, r := range back {
			replayed = append(replayed, r.ID)
			next := dispatch.NextAttempt(r.ID, r.TenantID, r.Queue, r.Priority, r.Attempt)
			if r.Conditional || r.JobStep { // written waiting: decided again, or its child run attached, as any release
				revived = append(revived, candidate{next, r.RunID, r.Step, r.Conditional, r.FanOut, r.JobStep})
			} else {
				ready = append(ready, next)
			}
		}
		if len(replayed) == 0 {
			return nil
		}
		if len(wait.Ids) > 0 {
			if err := q.WaitAgain(ctx, wait); err != nil {
				return err
			}
		}
		if len(skip.Ids) > 0 {
			if _, err := q.SkipTasks(ctx, skip); err != nil {
				return err
			}
		}
		if len(reopen) > 0 { // before the releases, whose conditions may end a run again
			// (their concurrency keys held again: a replay does not wait
			// for a full one, it is refused)
			if full, err := apply.in(tx).fullKey(ctx, reopen); err != nil {
				return err
			} else if full != "" {
				return fmt.Errorf("%w: its run's %s: replay once a run of the key ends", ErrCannotRetry, full)
			}
			if err := q.ReopenRuns(ctx, reopen); err != nil {
				return err
			}
		}
		if len(revived) > 0 {
			if err := apply.in(tx).release(ctx, revived); err != nil {
				return err
			}
		}
		after, _ := json.Marshal(map[string]any{"tasks": replayed})
		if err := q.InsertRunAudit(ctx, store.InsertRunAuditParams{
			ID: uuid.Must(uuid.NewV7()), TenantID: a.Tenant, Actor: a.Name, Action: "replay", TargetKind: "dead_letters",
			TargetID: replayed[0], TargetName: fmt.Sprintf("%d task(s)", len(replayed)), After: after,
		}); err != nil {
			return err
		}
		return apply.Dispatcher.Release(ctx, tx, ready)
	})
	return replayed, err
}
