package run

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// The start of an attempt: the task moves to running on a worker, with a
// new fencing token, and its attempt is on record before the step runs.

// Attempt is a started attempt: what the executor needs, and what its
// report needs to know of the step.
type Attempt struct {
	// ID is the attempt's id: in its task's row while it runs (the start
	// writes it there), of its row in attempts once it ended.
	ID      uuid.UUID
	Call    executor.Call
	Timeout time.Duration
	Shape   Shape
	// StartedAt is the attempt's start on the database's clock.
	StartedAt time.Time
	// ReleasedAt is when the task was first handed to the queue (nil for
	// a task released before it was recorded).
	ReleasedAt *time.Time
	// FiredAt is when the schedule fired the run (its instant plus its
	// jitter) for a run of trigger schedule; zero for others (started by
	// hand, catch-ups of missed instants, backfills): the schedule lag
	// is measured from it.
	FiredAt time.Time
	// TraceParent is the run's trace ("" when traces were off).
	TraceParent string
	// Refused, when set, is how the attempt ends without running its
	// step: an expression of the step could not be evaluated.
	Refused *executor.Result
	// Params are the run's params (JSON), for remote workers.
	Params []byte
}

// Shape is what finishing an attempt needs to know of its step and run,
// read from the job version the run pinned: it spares queries on the hot
// path (a single-step run needs no run lock, a step without dependents no
// child release).
type Shape = lifecycle.Shape

// An item of a fan-out (STEP[i]) has its step's settings; it has no
// children (its group has) and is never its run's only task.
func shapeOf(spec *parsedSpec, task string, attempt int) (Shape, bool) {
	i := spec.stepIndex(task)
	if i < 0 {
		return Shape{}, false
	}
	st, set := spec.Steps[i], spec.Effective(i)
	_, _, item := dag.StepOfItem(task)
	return Shape{Attempt: attempt, MaxAttempts: set.MaxAttempts, Initial: set.Initial, Max: set.Max,
		SingleTask: len(spec.Steps) == 1 && st.ForEach == "", HoldsRuns: spec.HoldsRuns(),
		HasChildren: spec.hasChildren[st.Name] && !item, Root: len(st.Needs) == 0 && !item, Item: item,
		SkipOnTimeout: st.ParkTimeout() == dag.TimeoutSkips}, true
}

// Start asks to start attempt number Attempt of a task.
type Start struct {
	TaskID  uuid.UUID
	Attempt int
}

// Worker names the worker process attempts start on: its name (shown on
// attempts) and its id (its row in workers, whose lease is its running
// tasks' lease).
type Worker struct {
	Name string
	ID   uuid.UUID
}

// StartAttempts starts a batch of attempts on a worker, in one statement;
// each task's lease is then the worker's. The answer is in the order of
// starts; nil for a start whose River job is stale (the task was
// cancelled, or that attempt already ran or is started by another start
// of the same batch).
func StartAttempts(ctx context.Context, db store.DBTX, starts []Start, w Worker) ([]*Attempt, error) {
	p := store.StartAttemptsParams{Worker: w.Name, WorkerID: w.ID}
	for _, st := range starts {
		p.Ids = append(p.Ids, st.TaskID)
		p.PrevAttempts = append(p.PrevAttempts, int32(st.Attempt-1))
		p.AttemptIds = append(p.AttemptIds, uuid.Must(uuid.NewV7()))
	}
	rows, err := store.New(db).StartAttempts(ctx, p)
	if err != nil {
		return nil, err
	}
	return startedAttempts(ctx, db, starts, rows)
}

// OwnAttempt is the attempt st asks for when worker w has started it
// already: w's own start, committed while its answer was lost (a
// connection cut at COMMIT), found when the start is tried again (a batch
// served once more, River retrying the job). Nil when the task does not
// run that attempt on w. Whether the attempt still runs in w's process is
// for w to know.
func OwnAttempt(ctx context.Context, db store.DBTX, st Start, w Worker) (*Attempt, error) {
	row, err := store.New(db).OwnRunningAttempt(ctx, store.OwnRunningAttemptParams{ID: st.TaskID, Attempt: int32(st.Attempt), WorkerID: w.ID})
	if store.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out, err := startedAttempts(ctx, db, []Start{st}, []store.StartAttemptsRow{store.StartAttemptsRow(row)})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// startedAttempts builds the attempts of started tasks (rows) in the order
// of starts, nil for a start without its row.
func startedAttempts(ctx context.Context, db store.DBTX, starts []Start, rows []store.StartAttemptsRow) ([]*Attempt, error) {
	byTask := make(map[uuid.UUID]store.StartAttemptsRow, len(rows))
	keys := make([]specKey, len(rows))
	for i, r := range rows {
		byTask[r.ID] = r
		keys[i] = specKey{r.JobID, r.JobVersion}
	}
	batchSpecs, err := specs.getMany(ctx, db, keys)
	if err != nil {
		return nil, err
	}
	out := make([]*Attempt, len(starts))
	for i, st := range starts {
		t, ok := byTask[st.TaskID]
		if !ok {
			continue
		}
		// Two River jobs for one attempt (a redelivery beside the job it
		// replaces) may share a batch: the task moved once, so only the
		// first of them starts it.
		delete(byTask, st.TaskID)
		spec := batchSpecs[specKey{t.JobID, t.JobVersion}]
		idx := spec.stepIndex(t.Step)
		if idx < 0 {
			return nil, fmt.Errorf("run %s: step %q is not in its job version", t.RunID, t.Step)
		}
		step := spec.Steps[idx]
		shape, _ := shapeOf(spec, t.Step, int(t.Attempt))
		var tp string
		if t.TraceParent != nil {
			tp = *t.TraceParent
		}
		var fired time.Time
		if t.Trigger == lifecycle.TriggerSchedule && shape.Root && t.Attempt == 1 {
			fired = spec.fireOf(t.Namespace, t.Name, t.ScheduledFor)
		}
		out[i] = &Attempt{
			FiredAt:     fired,
			ID:          t.AttemptID,
			Params:      t.Params,
			TraceParent: tp,
			Shape:       shape,
			Timeout:     spec.Effective(idx).Timeout,
			StartedAt:   t.StartedAt,
			ReleasedAt:  t.ReleasedAt,
			Call: executor.Call{
				RunID: t.RunID, TaskID: t.ID, JobID: t.JobID, Tenant: t.Tenant, Namespace: t.Namespace, Job: t.Name, Step: t.Step,
				Attempt: int(t.Attempt), FencingToken: t.FencingToken, ScheduledFor: t.ScheduledFor, Trigger: string(t.Trigger),
				Payload: json.RawMessage(step.Payload), Executor: step.Run, CPU: t.ResCpu, Memory: t.ResMemory,
			},
		}
	}
	return out, evaluate(ctx, db, out, batchSpecs, rows)
}

// evaluate fills in the expressions of the started attempts' steps
// (docs/workflows.md), reading the runs' params and the outputs their
// expressions read: one query for the batch, none when no step has
// expressions. An expression that cannot be evaluated refuses its
// attempt (Attempt.Refused): it fails for good without running.
func evaluate(ctx context.Context, db store.DBTX, attempts []*Attempt, batchSpecs map[specKey]*parsedSpec, rows []store.StartAttemptsRow) error {
	type job struct {
		att      *Attempt
		spec     *parsedSpec
		exprs    *dag.StepExprs
		params   []byte
		upstream []byte
		event    []byte
		item     []byte // an item's of a fan-out (JSON), nil for another task
		index    int32
		step     int // its index in spec.Steps
	}
	some := false
	for _, spec := range batchSpecs {
		some = some || spec.exprs != nil || spec.exprsErr != nil
	}
	if !some { // the usual batch: nothing to evaluate, nothing to build
		return nil
	}
	var jobs []job
	var outputs outputsToRead
	rowOf := make(map[uuid.UUID]*store.StartAttemptsRow, len(rows))
	for i := range rows {
		rowOf[rows[i].ID] = &rows[i]
	}
	for _, att := range attempts {
		if att == nil {
			continue
		}
		r := rowOf[att.Call.TaskID]
		spec := batchSpecs[specKey{r.JobID, r.JobVersion}]
		if spec.exprsErr != nil {
			att.Refused = refused(fmt.Errorf("the job version's expressions do not compile: %w", spec.exprsErr))
			continue
		}
		idx := spec.stepIndex(att.Call.Step)
		if idx < 0 {
			continue
		}
		x := spec.exprs.Step(spec.Steps[idx].Name)
		if x == nil {
			continue
		}
		jobs = append(jobs, job{att, spec, x, r.Params, r.Upstream, r.Event, r.Item, r.ItemIndex.Int32, idx})
		outputs.add(att.Call.RunID, x.Reads.Steps)
	}
	if len(jobs) == 0 {
		return nil
	}
	if err := outputs.load(ctx, store.New(db)); err != nil {
		return err
	}
	for _, j := range jobs {
		c := &j.att.Call
		vars := outputs.vars(runOf{id: c.RunID, scheduledFor: c.ScheduledFor, trigger: c.Trigger, job: c.Job, ns: c.Namespace,
			params: j.params, upstream: j.upstream, event: j.event, attempt: c.Attempt, item: j.item, itemIndex: j.index}, j.exprs.Reads.Steps, nil)
		run, payload, err := j.exprs.Apply(j.spec.Steps[j.step], vars)
		if err != nil {
			j.att.Refused = refused(err)
			continue
		}
		c.Executor, c.Payload, c.Evaluated = run, json.RawMessage(payload), true
	}
	return nil
}

// refused is the end of an attempt whose expressions failed: for good,
// the step's author's to fix.
func refused(err error) *executor.Result {
	r := executor.Result{ExitReason: executor.ReasonExpression, FailureClass: executor.ClassUser, Error: err.Error()}.Storable()
	return &r
}
