package run

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/store"
)

// Parked steps (docs/parked-steps.md): released, a step that sleeps is
// parked in the releasing transaction (park): its task running, with an
// attempt on record on no worker, and its parked_steps row saying when it
// ends. The scheduler node of its shard ends it when it is due
// (WakeParked), through Finish, as a worker's report would.

// FailpointParkedWoken is hit in the transaction that ends due parked
// steps (WakeParked), once their ends are written, before it commits.
const FailpointParkedWoken = "run/parked-woken"

// sleepWorker is the worker a sleeping step's attempts name.
const sleepWorker = "orrery (sleep)"

// pendingPark is a released step that parks.
type pendingPark struct {
	cand  candidate
	run   store.ConditionRunsRow
	step  dag.Step
	exprs *dag.StepExprs
}

// park parks the released steps of todo: a sleep's instant evaluated (its
// until), its task running and its row written; a step whose instant does
// not evaluate, or is past the bound, goes to v.fail.
func (ap *applying) park(ctx context.Context, todo []pendingPark, outputs *outputsToRead, v *verdicts) error {
	if len(todo) == 0 {
		return nil
	}
	if outputs.read == nil { // (childCalls may have read them)
		if err := outputs.load(ctx, ap.q); err != nil {
			return err
		}
	}
	var spent uint64
	var p store.ParkTasksParams
	var now time.Time // the database's, read for the first until
	for _, t := range todo {
		sl := t.step.Sleep
		after, until := sl.For.Seconds(), time.Time{}
		if sl.Until != "" {
			var vars = outputs.vars(runOf{id: t.run.ID, scheduledFor: t.run.ScheduledFor, trigger: string(t.run.Trigger), job: t.run.Name,
				ns: t.run.Namespace, params: t.run.Params, upstream: t.run.Upstream, event: t.run.Event, attempt: t.cand.ready.Attempt + 1}, readsOf(t.exprs), &spent)
			s, err := t.exprs.Text("sleep.until", sl.Until, vars)
			if err != nil {
				v.fail = append(v.fail, verdict{t.cand, err.Error()})
				continue
			}
			at, err := time.Parse(time.RFC3339, s)
			if err == nil && now.IsZero() {
				if now, err = ap.q.DatabaseNow(ctx); err != nil {
					return err
				}
			}
			switch {
			case err != nil:
				v.fail = append(v.fail, verdict{t.cand, fmt.Sprintf("sleep.until: %.100q is not an RFC 3339 instant", s)})
				continue
			case at.After(now.Add(dag.MaxSleep)):
				v.fail = append(v.fail, verdict{t.cand, fmt.Sprintf("sleep.until: %s is more than 366 days ahead", at.UTC().Format(time.RFC3339))})
				continue
			}
			after, until = 0, at
		}
		p.Ids = append(p.Ids, t.cand.ready.TaskID)
		p.AttemptIds = append(p.AttemptIds, uuid.Must(uuid.NewV7()))
		p.Workers = append(p.Workers, sleepWorker)
		p.Kinds = append(p.Kinds, "sleep")
		p.Shards = append(p.Shards, t.run.Shard)
		p.AfterSeconds = append(p.AfterSeconds, after)
		p.Untils = append(p.Untils, until)
	}
	if len(p.Ids) == 0 {
		return nil
	}
	parked, err := ap.q.ParkTasks(ctx, p)
	if err != nil {
		return err
	}
	if len(parked) != len(p.Ids) {
		return fmt.Errorf("parked %d of %d steps: a task moved meanwhile", len(parked), len(p.Ids))
	}
	return nil
}

// readsOf is the steps an expression of the step reads (none without
// expressions).
func readsOf(x *dag.StepExprs) []string {
	if x == nil {
		return nil
	}
	return x.Reads.Steps
}

// WakeParked ends the shards' parked steps that are due, at most batch of
// them, in the caller's transaction: each attempt succeeds with
// {"until", "time"} under the fencing token its row holds (a stale one
// ends nothing: the run was cancelled or retried meanwhile), with all
// that follows (Finish), and the rows are deleted. It returns the steps
// (tasks) it took, also when it fails after taking them.
func (a *Applier) WakeParked(ctx context.Context, tx pgx.Tx, shards []int32, batch int32) ([]uuid.UUID, error) {
	ap := a.in(tx)
	due, err := ap.q.TakeDueParked(ctx, store.TakeDueParkedParams{Shards: shards, Batch: batch})
	if err != nil || len(due) == 0 {
		return nil, err
	}
	// The runs first, in key order, as a cancel locks a run before its
	// tasks (Finish would take a one-task run's task before its run).
	runs := make([]uuid.UUID, len(due))
	ids := make([]uuid.UUID, len(due))
	reports := make([]Report, len(due))
	for i, d := range due {
		now := d.Now.UTC()
		runs[i], ids[i] = d.RunID, d.TaskID
		until := now // (a row due has its time)
		if d.WakeAt != nil {
			until = d.WakeAt.UTC()
		}
		out, _ := json.Marshal(map[string]string{"until": until.Format(time.RFC3339Nano), "time": now.Format(time.RFC3339Nano)})
		reports[i] = Report{TaskID: d.TaskID, RunID: d.RunID, FencingToken: d.FencingToken, Result: executor.Result{OK: true, Output: string(out)}}
	}
	if err := ap.q.LockRuns(ctx, sortedUnique(runs)); err != nil {
		return ids, err
	}
	if _, err := ap.finish(ctx, reports); err != nil {
		return ids, err
	}
	if err := ap.q.DeleteParked(ctx, ids); err != nil {
		return ids, err
	}
	a.Failpoints.Hit(FailpointParkedWoken)
	return ids, nil
}
