package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/expr"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// Steps that run another job (run.job, docs/workflows.md "A step that
// runs another job"). Released, a job step writes its call (startCalls):
// a call_starts row, its params evaluated, which the scheduler of the
// child job's shard turns into the child run (StartCalls): the run of the
// job it names, of trigger parent, its params the step's, its roots
// released as any run's; the step is then running, with an attempt on
// record but no worker, no lease and no slot (the child's tasks hold
// those). The child run's end is an upstream_finishes event, which the
// scheduler of the child's shard turns into the step's end (FinishCalls)
// in one transaction with the event's deletion. One child per task, ever
// (runs_parent_task): a task released again (its run retried, a dead
// letter replayed) attaches to the child it started, which is retried
// from where it failed when it did.

// MaxCallDepth bounds a chain of runs started by each other's steps: a
// step whose run has this many runs above it is dead-lettered (a cycle
// that apply could not see: two jobs changed at once).
const MaxCallDepth = 10

// FailpointCallStarted is hit in the transaction that starts child runs
// (StartCalls), once they and their steps' attempts are written, before
// it commits.
const FailpointCallStarted = "run/call-started"

// callWorker is the worker a job step's attempts name.
const callWorker = "orrery (child run)"

// maxCallOutputs bounds the child's outputs in a job step's output (JSON),
// below executor.MaxOutput.
const maxCallOutputs = 60 << 10

// pendingCall is a job step about to call for a new child run.
type pendingCall struct {
	cand  candidate
	run   store.ConditionRunsRow
	step  dag.Step
	exprs *dag.StepExprs
	call  *dag.JobCall // its run.job, params evaluated
}

// startCalls writes the calls of job steps released (all of cands), their
// child runs to be started by StartCalls, or attaches each to the child it
// started before; a step whose call cannot be made (its job missing, its
// params refused by the job, the right of its job's author gone, the
// depth limit) is dead-lettered, naming why.
func (ap *applying) startCalls(ctx context.Context, cands []candidate) error {
	v := verdicts{holdsRuns: map[uuid.UUID]bool{}}
	byRun, got, err := ap.runsOf(ctx, cands)
	if err != nil {
		return err
	}
	taskIDs := make([]uuid.UUID, len(cands))
	for i, c := range cands {
		taskIDs[i] = c.ready.TaskID
	}
	had, err := ap.q.ChildRuns(ctx, taskIDs)
	if err != nil {
		return err
	}
	children := make(map[uuid.UUID]store.ChildRunsRow, len(had))
	for _, h := range had {
		children[h.ParentTaskID] = h
	}
	start := store.StartCallsParams{Worker: callWorker}
	add := func(task, child uuid.UUID) {
		start.Ids = append(start.Ids, task)
		start.ChildRunIds = append(start.ChildRunIds, child)
		start.AttemptIds = append(start.AttemptIds, uuid.Must(uuid.NewV7()))
	}
	var todo []pendingCall
	var parks []pendingPark        // steps that park (sleep) instead of calling
	var ended []store.ChildRunsRow // children that succeeded already: their steps end now
	var outputs outputsToRead
	for _, c := range cands {
		r, ok := byRun[c.run]
		if !ok {
			return fmt.Errorf("task %s: run %s not found", c.ready.TaskID, c.run)
		}
		spec := got[specKey{r.JobID, r.JobVersion}]
		v.holdsRuns[c.run] = spec.HoldsRuns()
		if ch, ok := children[c.ready.TaskID]; ok {
			switch lifecycle.RunStatus(ch.Status) {
			case lifecycle.RunQueued, lifecycle.RunPending, lifecycle.RunRunning:
			case lifecycle.RunSucceeded:
				ended = append(ended, ch)
			case lifecycle.RunFailed, lifecycle.RunDeadLettered, lifecycle.RunCancelled:
				if err := ap.retryChild(ctx, ch, r, c.step); err != nil {
					return err
				}
			default:
				v.fail = append(v.fail, verdict{c, fmt.Sprintf("run.job: its child run %s is %s, and cannot be run again", ch.ID, ch.Status)})
				continue
			}
			add(c.ready.TaskID, ch.ID)
			continue
		}
		i := spec.stepIndex(c.step)
		if i >= 0 && spec.Steps[i].Parks() && spec.exprsErr != nil {
			v.fail = append(v.fail, verdict{c, "the job version's expressions do not compile: " + spec.exprsErr.Error()})
			continue
		}
		if i >= 0 && spec.Steps[i].Parks() {
			pk := pendingPark{cand: c, run: r, step: spec.Steps[i], exprs: spec.exprs.Step(c.step)}
			if pk.exprs != nil {
				outputs.add(c.run, pk.exprs.Reads.Steps)
				outputs.add(c.run, pk.exprs.MatchReads.Steps) // (a wait's key)
			}
			parks = append(parks, pk)
			continue
		}
		switch {
		case i < 0 || spec.Steps[i].Run.Job == nil: // a task written by a newer version of this code
			v.fail = append(v.fail, verdict{c, "run.job: the step runs no job in its job version"})
			continue
		case spec.exprsErr != nil:
			v.fail = append(v.fail, verdict{c, "run.job.params: the job version's expressions do not compile: " + spec.exprsErr.Error()})
			continue
		case int(r.Depth) >= MaxCallDepth:
			v.fail = append(v.fail, verdict{c, fmt.Sprintf("run.job: its run is %d runs below the first (the limit is %d): a cycle of jobs running each other?", r.Depth, MaxCallDepth)})
			continue
		}
		p := pendingCall{cand: c, run: r, step: spec.Steps[i], exprs: spec.exprs.Step(c.step), call: spec.Steps[i].Run.Job}
		if p.exprs != nil {
			outputs.add(c.run, p.exprs.Reads.Steps)
		}
		todo = append(todo, p)
	}
	calls, err := childCalls(ctx, ap.q, todo, &outputs, &v)
	if err != nil {
		return err
	}
	if err := ap.park(ctx, parks, &outputs, &v); err != nil {
		return err
	}
	if len(calls) > 0 {
		p := store.InsertCallStartsParams{}
		for _, c := range calls {
			p.TaskIds = append(p.TaskIds, c.cand.ready.TaskID)
			p.TenantIds = append(p.TenantIds, c.run.TenantID)
			p.Shards = append(p.Shards, c.callee.Shard)
			p.JobIds = append(p.JobIds, c.callee.ID)
			p.RunIds = append(p.RunIds, c.run.ID)
			p.Params = append(p.Params, string(c.params))
			p.RootRunIds = append(p.RootRunIds, c.run.RootRunID)
			p.Depths = append(p.Depths, c.run.Depth+1)
		}
		if err := ap.q.InsertCallStarts(ctx, p); err != nil {
			return err
		}
	}
	if len(start.Ids) > 0 {
		started, err := ap.q.StartCalls(ctx, start)
		if err != nil {
			return err
		}
		if len(started) != len(start.Ids) {
			return fmt.Errorf("started %d of %d job steps: a task moved meanwhile", len(started), len(start.Ids))
		}
	}
	if len(ended) > 0 {
		ends := make([]ChildEnd, len(ended))
		for i, ch := range ended {
			ends[i] = ChildEnd{Run: ch.ID}
		}
		if err := ap.finishCalls(ctx, ends, true); err != nil {
			return err
		}
	}
	return ap.settle(ctx, v)
}

// call is a job step's call of a new child run, as startCalls writes it.
type call struct {
	cand   candidate
	run    store.ConditionRunsRow
	callee store.CalleeJobsRow
	params dag.Payload // the step's, evaluated (typed against the job when the run is written)
}

// childCalls evaluates the params of the steps of todo and checks their
// calls: the jobs they name (locked FOR SHARE), their params against those
// jobs, and their jobs' authors' right to run them (access.KeyMayRun); a
// step whose call fails one goes to v.fail.
func childCalls(ctx context.Context, q *store.Queries, todo []pendingCall, outputs *outputsToRead, v *verdicts) ([]call, error) {
	if len(todo) == 0 {
		return nil, nil
	}
	if err := outputs.load(ctx, q); err != nil {
		return nil, err
	}
	spent := budgets{}
	var cp store.CalleeJobsParams
	kept := todo[:0]
	for _, p := range todo {
		if p.exprs != nil {
			vars := outputs.vars(runOfRow(p.run, p.cand.ready.Attempt), p.exprs.Reads.Steps, spent.of(p.run.ID))
			exec, _, err := p.exprs.Apply(p.step, vars)
			if err != nil {
				v.fail = append(v.fail, verdict{p.cand, err.Error()})
				continue
			}
			p.call = exec.Job
		}
		cp.TenantIds = append(cp.TenantIds, p.run.TenantID)
		cp.Namespaces = append(cp.Namespaces, p.call.Namespace)
		cp.Names = append(cp.Names, p.call.Name)
		kept = append(kept, p)
	}
	if len(kept) == 0 {
		return nil, nil
	}
	type askKey struct {
		key             uuid.UUID
		namespace, name string
	}
	asked := map[askKey]bool{} // access.KeyMayRun's answers: a batch's calls by one author to one job ask once
	mayRun := func(tenant, key uuid.UUID, namespace, name string) (bool, error) {
		k := askKey{key, namespace, name}
		if may, ok := asked[k]; ok {
			return may, nil
		}
		may, err := access.KeyMayRun(ctx, q, tenant, key, namespace, name)
		asked[k] = may
		return may, err
	}
	rows, err := q.CalleeJobs(ctx, cp)
	if err != nil {
		return nil, err
	}
	type jobKey struct {
		tenant          uuid.UUID
		namespace, name string
	}
	callees := make(map[jobKey]store.CalleeJobsRow, len(rows))
	for _, r := range rows {
		callees[jobKey{r.TenantID, r.Namespace, r.Name}] = r
	}
	// Who may make each call: the key whose right apply checked when the
	// calling job was last written, asked again now.
	callers := make([]uuid.UUID, len(kept))
	for i, p := range kept {
		callers[i] = p.run.JobID
	}
	grants, err := q.CallAuthors(ctx, callers)
	if err != nil {
		return nil, err
	}
	type callKey struct {
		caller          uuid.UUID // the calling job
		namespace, name string    // the job called
	}
	authors := make(map[callKey]*uuid.UUID, len(grants))
	for _, g := range grants {
		authors[callKey{g.JobID, g.CalleeNamespace, g.CalleeName}] = g.AuthorKey
	}
	var out []call
	for _, p := range kept {
		callee, ok := callees[jobKey{p.run.TenantID, p.call.Namespace, p.call.Name}]
		if !ok {
			v.fail = append(v.fail, verdict{p.cand, fmt.Sprintf("run.job: job %s/%s does not exist", p.call.Namespace, p.call.Name)})
			continue
		}
		author, ok := authors[callKey{p.run.JobID, p.call.Namespace, p.call.Name}]
		if !ok {
			v.fail = append(v.fail, verdict{p.cand, fmt.Sprintf("run.job: the current definition of %s/%s does not run %s/%s (apply it with the step to run it)",
				p.run.Namespace, p.run.Name, p.call.Namespace, p.call.Name)})
			continue
		}
		if author != nil {
			may, err := mayRun(p.run.TenantID, *author, p.call.Namespace, p.call.Name)
			if err != nil {
				return nil, err
			}
			if !may {
				v.fail = append(v.fail, verdict{p.cand, fmt.Sprintf("run.job: the key that last wrote %s/%s may no longer run %s/%s (revoked, expired, or its grant taken away); apply the job again with a key that may",
					p.run.Namespace, p.run.Name, p.call.Namespace, p.call.Name)})
				continue
			}
		}
		var spec dag.JobSpec
		if err := json.Unmarshal(callee.Spec, &spec); err != nil {
			return nil, fmt.Errorf("job %s: spec: %w", callee.ID, err)
		}
		if _, err := callParams(&spec, p.call.Params); err != nil { // checked again when the run is written
			v.fail = append(v.fail, verdict{p.cand, "run.job.params: " + err.Error()})
			continue
		}
		out = append(out, call{cand: p.cand, run: p.run, callee: callee, params: p.call.Params})
	}
	return out, nil
}

// callParams are a child run's params: the step's (a JSON object, or
// none) typed against the child job's declaration, its defaults filling
// in the rest.
func callParams(spec *dag.JobSpec, given dag.Payload) (dag.Payload, error) {
	var values map[string]dag.Payload
	if len(given) > 0 {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(given, &raw); err != nil {
			return nil, errors.New("not a mapping of param names to values")
		}
		values = make(map[string]dag.Payload, len(raw))
		for k, v := range raw {
			values[k] = dag.Payload(v)
		}
	}
	params, err := spec.RunParams(values)
	if err != nil {
		return nil, err
	}
	if params == nil {
		params = dag.Payload{}
	}
	return params, nil
}

// FreeInstants moves each of ats (of one job) on by a microsecond until
// the job has no run at it and no other of ats takes it, and returns them.
func FreeInstants(ctx context.Context, q *store.Queries, jobID uuid.UUID, ats []time.Time) ([]time.Time, error) {
	out := make([]time.Time, len(ats))
	for i, at := range ats {
		out[i] = at.Truncate(time.Microsecond).UTC()
	}
	taken := map[time.Time]bool{}
	for range 1000 {
		have, err := q.RunsAt(ctx, store.RunsAtParams{JobID: jobID, Ats: out})
		if err != nil {
			return nil, err
		}
		for _, h := range have {
			taken[h.ScheduledFor.UTC()] = true
		}
		moved := false
		inBatch := map[time.Time]bool{}
		for i := range out {
			for taken[out[i]] || inBatch[out[i]] {
				out[i] = out[i].Add(time.Microsecond)
				moved = true
			}
			inBatch[out[i]] = true
		}
		if !moved {
			return out, nil
		}
	}
	return nil, fmt.Errorf("job %s: no free instant near %s", jobID, ats[0].Format(time.RFC3339Nano))
}

// retryChild runs a job step's child run that failed or was cancelled
// again from where it failed, as RetryRun does (its job's overlap policy
// aside: a call runs whatever the child job's other runs do), audited as
// the system's, on behalf of step of run r.
func (ap *applying) retryChild(ctx context.Context, ch store.ChildRunsRow, r store.ConditionRunsRow, step string) error {
	if _, err := ap.q.LockRun(ctx, ch.ID); err != nil {
		return err
	}
	row, err := ap.q.GetRun(ctx, store.GetRunParams{TenantID: ch.TenantID, ID: ch.ID})
	if err != nil {
		return err
	}
	before := fromGetRow(row)
	if !before.Status.AcceptsRetry() {
		return nil // ended otherwise meanwhile: attached as it is
	}
	actor := job.Actor{Tenant: ch.TenantID, Name: fmt.Sprintf("orrery (step %s of run %s, released again)", step, r.ID)}
	return retryGraph(ctx, ap.tx, ap.Applier, actor, before, row.Namespace+"/"+row.JobName, false)
}

// ChildEnd is the end of a child run, from its upstream_finishes event.
type ChildEnd struct {
	Run        uuid.UUID
	FinishedAt time.Time
}

// FinishCalls ends the job steps whose child runs ended (each end the
// child's latest: an end undone since, the child retried, ends nothing),
// as a worker's report would: succeeded with the child's outputs, or
// dead-lettered naming the child's end (a job step does not retry: its
// run's retry retries the child). In the caller's transaction, which
// takes the events; the parent runs are locked in key order.
func (a *Applier) FinishCalls(ctx context.Context, tx pgx.Tx, ends []ChildEnd) error {
	return a.in(tx).finishCalls(ctx, ends, false)
}

// finishCalls is FinishCalls; latest reads the children's latest ends
// (an attach to a child that succeeded already) instead of the events'.
func (ap *applying) finishCalls(ctx context.Context, ends []ChildEnd, latest bool) error {
	p := store.CallsEndedParams{Latest: latest}
	for _, e := range ends {
		p.RunIds = append(p.RunIds, e.Run)
		p.FinishedAts = append(p.FinishedAts, e.FinishedAt)
	}
	rows, err := ap.q.CallsEnded(ctx, p)
	if err != nil || len(rows) == 0 {
		return err
	}
	// The parent runs first, in key order, as a cancel locks a run before
	// its tasks: Finish would take a one-task run's task before its run.
	parents := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		parents[i] = r.RunID
	}
	if err := ap.q.LockRuns(ctx, parents); err != nil {
		return err
	}
	reports := make([]Report, len(rows))
	for i, r := range rows {
		res := executor.Result{OK: r.Status == lifecycle.RunSucceeded}
		if res.OK {
			end := End{Run: r.ChildRunID, Namespace: r.ChildNamespace, Job: r.ChildJob, Outcome: string(r.Status), FinishedAt: r.ChildFinishedAt}
			out, err := RunEnd(ctx, ap.q, end, maxCallOutputs, nil)
			if err != nil {
				return err
			}
			res.Output = string(out)
		} else {
			res.ExitReason, res.FailureClass = executor.ReasonError, executor.ClassUser
			res.Error = fmt.Sprintf("its child run %s ended %s", r.ChildRunID, r.Status)
			if r.Reason != "" {
				res.Error += ": " + r.Reason
			}
		}
		reports[i] = Report{TaskID: r.ID, RunID: r.RunID, FencingToken: r.FencingToken, Result: res}
	}
	_, err = ap.finish(ctx, reports)
	return err
}

// End is a run's end, as RunEnd describes it.
type End struct {
	Run            uuid.UUID
	Namespace, Job string
	Outcome        string
	FinishedAt     time.Time
}

// RunEnd describes a run's end as JSON: its id, job, namespace, outcome,
// end and the outputs of its last steps (those no step needs) that
// succeeded, parsed as steps.STEP.output is, while they fit maxOutputs
// (outputs_cut lists the ones left out); a last step that fans out gives
// its items' outputs in item order (null for an item that did not
// succeed), as steps.STEP.outputs. extra adds fields. It is run.upstream
// of a run an upstream's end starts, and a job step's output.
func RunEnd(ctx context.Context, q *store.Queries, e End, maxOutputs int, extra map[string]any) ([]byte, error) {
	rows, err := q.LeafOutputs(ctx, e.Run)
	if err != nil {
		return nil, err
	}
	outputs := map[string]any{}
	var cut []string
	size := 0
	for _, r := range rows {
		if r.OutputTruncated || size+len(r.Output) > maxOutputs {
			cut = append(cut, r.Step)
			continue
		}
		v := expr.Output(r.Output)
		if b, err := json.Marshal(v); err != nil || bytes.Contains(b, []byte(`\u0000`)) {
			cut = append(cut, r.Step) // 1e999, or a NUL: JSON that jsonb does not store
			continue
		}
		size += len(r.Output)
		outputs[r.Step] = v
	}
	groups, err := q.LeafGroups(ctx, e.Run)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		items, err := q.ItemOutputs(ctx, store.ItemOutputsParams{GroupIds: []uuid.UUID{g.ID}, MaxBytes: int64(maxOutputs - size)})
		if err != nil {
			return nil, err
		}
		list, n, whole := make([]any, 0, len(items)), 0, true
		for _, it := range items {
			if it.Cut || it.OutputTruncated {
				whole = false
				break
			}
			var v any
			if it.Status == lifecycle.TaskSucceeded {
				v = expr.Output(it.Output)
			}
			list = append(list, v)
			n += len(it.Output)
		}
		if b, err := json.Marshal(list); !whole || err != nil || bytes.Contains(b, []byte(`\u0000`)) {
			cut = append(cut, g.Step)
			continue
		}
		size += n
		outputs[g.Step] = list
	}
	u := map[string]any{"id": e.Run.String(), "job": e.Job, "namespace": e.Namespace, "outcome": e.Outcome,
		"finished_at": e.FinishedAt.UTC().Format(time.RFC3339Nano), "outputs": outputs}
	for k, v := range extra {
		u[k] = v
	}
	if len(cut) > 0 {
		u["outputs_cut"] = cut
	}
	return json.Marshal(u)
}
