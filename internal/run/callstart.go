package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

// RoomsFunc reads the storage rooms of tenants (usage.RunRooms), on a
// connection of its own.
type RoomsFunc func(tenants []uuid.UUID) (usage.Rooms, error)

// StartCalls starts the child runs of at most batch calls waiting in
// shards (call_starts, oldest first, FOR UPDATE SKIP LOCKED), in tx: the
// scheduler's, fenced by those shards. Only the owner of a child job's
// shard writes its child runs, one transaction at a time, so no two
// transactions race for one job's instants. Locks, in order: the calls,
// the child jobs (FOR SHARE, id order), the trees' counts (root order),
// the steps' runs (id order). A call whose step no longer waits (its run
// cancelled) is dropped; the others are checked again (the job still
// there, the params it takes now, the storage quota, the tree's bound),
// and a call refused dead-letters its step, naming why. It returns how
// calls it took (their steps' tasks), also when it fails after taking
// them.
func (a *Applier) StartCalls(ctx context.Context, tx pgx.Tx, shards []int32, batch int32, rooms RoomsFunc) ([]uuid.UUID, error) {
	ap := a.in(tx)
	taken, err := ap.q.TakeCallStarts(ctx, store.TakeCallStartsParams{Shards: shards, Batch: batch})
	if err != nil || len(taken) == 0 {
		return nil, err
	}
	all := make([]uuid.UUID, len(taken))
	var live []store.TakeCallStartsRow
	for i, c := range taken {
		all[i] = c.TaskID
		if lifecycle.TaskStatus(c.TaskStatus) == lifecycle.TaskWaiting && c.JobStep {
			live = append(live, c)
		}
	}
	if err := ap.startLive(ctx, live, rooms); err != nil {
		return all, err
	}
	if err := ap.q.DeleteCallStarts(ctx, all); err != nil {
		return all, err
	}
	a.Failpoints.Hit(FailpointCallStarted)
	return all, nil
}

// startLive starts the calls of StartCalls whose steps waited when taken.
func (ap *applying) startLive(ctx context.Context, calls []store.TakeCallStartsRow, rooms RoomsFunc) error {
	if len(calls) == 0 {
		return nil
	}
	var jobIDs, roots, tenants, runIDs []uuid.UUID
	for _, c := range calls {
		jobIDs, runIDs = append(jobIDs, c.JobID), append(runIDs, c.RunID)
		roots, tenants = append(roots, c.RootRunID), append(tenants, c.TenantID)
	}
	jobs, err := ap.q.CallJobs(ctx, sortedUnique(jobIDs))
	if err != nil {
		return err
	}
	byID := make(map[uuid.UUID]store.CallJobsRow, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
	}
	t, err := lockTrees(ctx, ap.q, roots, tenants)
	if err != nil {
		return err
	}
	open, err := ap.q.LockOpenRuns(ctx, sortedUnique(runIDs))
	if err != nil {
		return err
	}
	taskIDs := make([]uuid.UUID, len(calls))
	for i, c := range calls {
		taskIDs[i] = c.TaskID
	}
	waiting, err := ap.q.WaitingJobSteps(ctx, taskIDs) // read again under the runs' locks
	if err != nil {
		return err
	}
	cands := make([]candidate, 0, len(calls))
	for _, c := range calls {
		if slices.Contains(open, c.RunID) && slices.Contains(waiting, c.TaskID) {
			cands = append(cands, candidate{ready: dispatch.Ready{TaskID: c.TaskID, Tenant: c.TenantID}, run: c.RunID, jobStep: true})
		}
	}
	if len(cands) == 0 {
		return nil
	}
	byRun, got, err := ap.runsOf(ctx, cands) // the steps' runs, and their specs (a run that ends: its overlap policy)
	if err != nil {
		return err
	}
	v := verdicts{holdsRuns: map[uuid.UUID]bool{}}
	for runID, r := range byRun {
		v.holdsRuns[runID] = got[specKey{r.JobID, r.JobVersion}].HoldsRuns()
	}
	now, err := ap.q.DatabaseNow(ctx)
	if err != nil {
		return err
	}
	callOf := make(map[uuid.UUID]store.TakeCallStartsRow, len(calls))
	for _, c := range calls {
		callOf[c.TaskID] = c
	}
	r, err := rooms(tenants) // (the calls' tenants)
	if err != nil {
		return err
	}
	var news []New
	var newCands []candidate
	for _, cand := range cands {
		c := callOf[cand.ready.TaskID]
		n, why, err := childRun(c, byID, now)
		switch {
		case err != nil:
			return err
		case why != "":
			v.fail = append(v.fail, verdict{cand, why})
			continue
		}
		// The storage quota, then the tree: a call refused takes no room.
		room := r.Clone()
		err = room.Add(n.Job.Tenant, usage.Usage{Runs: 1, Tasks: int64(len(n.Job.Spec.Steps))})
		var exceeded *usage.ExceededError
		switch {
		case errors.As(err, &exceeded):
			v.fail = append(v.fail, verdict{cand, "run.job: " + err.Error()})
			continue
		case err != nil:
			return err
		}
		if why, ok := t.take(c.RootRunID); !ok {
			v.fail = append(v.fail, verdict{cand, "run.job: " + why})
			continue
		}
		r = room
		news, newCands = append(news, n), append(newCands, cand)
	}
	if len(news) > 0 {
		ids, err := ap.insertChildren(ctx, news)
		if err != nil {
			return err
		}
		start := store.StartCallsParams{Worker: callWorker}
		for i := range news {
			start.Ids = append(start.Ids, newCands[i].ready.TaskID)
			start.ChildRunIds = append(start.ChildRunIds, ids[i])
			start.AttemptIds = append(start.AttemptIds, uuid.Must(uuid.NewV7()))
		}
		started, err := ap.q.StartCalls(ctx, start)
		if err != nil {
			return err
		}
		if len(started) != len(start.Ids) {
			return fmt.Errorf("started %d of %d job steps: a task moved meanwhile", len(started), len(start.Ids))
		}
	}
	if err := t.write(ctx, ap.q); err != nil {
		return err
	}
	return ap.settle(ctx, v)
}

// childRun is the run a call starts, or why it cannot (its job gone, its
// params refused by the job's current declaration).
func childRun(c store.TakeCallStartsRow, jobs map[uuid.UUID]store.CallJobsRow, now time.Time) (New, string, error) {
	j, ok := jobs[c.JobID]
	if !ok || j.TenantID != c.TenantID {
		return New{}, fmt.Sprintf("run.job: the job it runs (%s) was deleted before its run started", c.JobID), nil
	}
	var spec dag.JobSpec
	if err := json.Unmarshal(j.Spec, &spec); err != nil {
		return New{}, "", fmt.Errorf("job %s: spec: %w", j.ID, err)
	}
	params, err := callParams(&spec, dag.Payload(c.Params))
	if err != nil {
		return New{}, "run.job.params: " + err.Error() + " (the job changed since the step was released)", nil
	}
	return New{Job: JobRef{ID: j.ID, Tenant: j.TenantID, Version: j.Version, Shard: int(j.Shard), Spec: &spec},
		At: now, Trigger: lifecycle.TriggerParent, Status: lifecycle.RunPending, Params: params, ParentTask: c.TaskID,
		Depth: int(c.Depth), Root: c.RootRunID}, "", nil
}

// insertChildren writes child runs, each at the first free instant of its
// job at or after its own (FreeInstants: runs are unique per job and
// instant), and returns their ids.
func (ap *applying) insertChildren(ctx context.Context, news []New) ([]uuid.UUID, error) {
	if len(news) == 0 {
		return nil, nil
	}
	byJob := map[uuid.UUID][]int{}
	for i, n := range news {
		byJob[n.Job.ID] = append(byJob[n.Job.ID], i)
	}
	for job, idx := range byJob {
		ats := make([]time.Time, len(idx))
		for k, i := range idx {
			ats[k] = news[i].At
		}
		moved, err := FreeInstants(ctx, ap.q, job, ats)
		if err != nil {
			return nil, err
		}
		for k, i := range idx {
			news[i].At = moved[k]
		}
	}
	ids, err := ap.Insert(ctx, ap.tx, news, nil, nil)
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if id == uuid.Nil { // another transaction took the instant meanwhile (a trigger): this one is tried again
			return nil, fmt.Errorf("child run of task %s: the instant %s of job %s was taken meanwhile", news[i].ParentTask, news[i].At.Format(time.RFC3339Nano), news[i].Job.ID)
		}
	}
	return ids, nil
}

// sortedUnique sorts ids and drops repeats.
func sortedUnique(ids []uuid.UUID) []uuid.UUID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	return slices.Compact(out)
}
