package run

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag/expr"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// What an expression of a run reads (expr.Vars), built in one place for
// a step's fields at an attempt's start (start.go) and for its condition
// at its release (condition.go).

// outputsToRead collects the (run, step) pairs whose outputs expressions
// read, for one StepOutputs query.
type outputsToRead struct {
	p    store.StepOutputsParams
	read map[stepKey]expr.StepVars
}

type stepKey struct {
	run  uuid.UUID
	step string
}

func (o *outputsToRead) add(run uuid.UUID, steps []string) {
	for _, s := range steps {
		o.p.RunIds = append(o.p.RunIds, run)
		o.p.Steps = append(o.p.Steps, s)
	}
}

// load reads them (none asked: no query).
func (o *outputsToRead) load(ctx context.Context, q *store.Queries) error {
	o.read = map[stepKey]expr.StepVars{}
	if len(o.p.RunIds) == 0 {
		return nil
	}
	rows, err := q.StepOutputs(ctx, o.p)
	if err != nil {
		return err
	}
	groups := map[uuid.UUID]stepKey{}
	var ids []uuid.UUID
	for _, r := range rows {
		k := stepKey{r.RunID, r.Step}
		if r.FanOut {
			o.read[k] = expr.StepVars{Group: true, Status: string(r.Status)}
			if _, dup := groups[r.ID]; !dup {
				groups[r.ID] = k
				ids = append(ids, r.ID)
			}
			continue
		}
		o.read[k] = expr.StepVars{Output: expr.Output(r.Output), Status: string(r.Status), Truncated: r.OutputTruncated}
	}
	if len(ids) == 0 {
		return nil
	}
	items, err := q.ItemOutputs(ctx, store.ItemOutputsParams{GroupIds: ids, MaxBytes: expr.MaxOutputsRead})
	if err != nil {
		return err
	}
	for _, it := range items {
		k := groups[it.GroupID]
		sv := o.read[k]
		var out any
		if it.Status == lifecycle.TaskSucceeded {
			out = expr.Output(it.Output)
		}
		sv.Truncated = sv.Truncated || it.OutputTruncated || it.Cut
		if !sv.Truncated {
			sv.Outputs = append(sv.Outputs, out)
		}
		o.read[k] = sv
	}
	return nil
}

// runOf is what an expression reads of its run.
type runOf struct {
	id               uuid.UUID
	scheduledFor     time.Time
	trigger, job, ns string
	params           []byte // runs.params, JSON
	upstream         []byte // runs.upstream, JSON (nil: none)
	event            []byte // runs.event, JSON (nil: none)
	attempt          int
	item             []byte // an item's element of its fan-out's list, JSON (nil: not an item)
	itemIndex        int32
}

// runOfRow is a run as its releases' expressions read it, at attempt.
func runOfRow(r store.ConditionRunsRow, attempt int) runOf {
	return runOf{id: r.ID, scheduledFor: r.ScheduledFor, trigger: string(r.Trigger), job: r.Name, ns: r.Namespace,
		params: r.Params, upstream: r.Upstream, event: r.Event, attempt: attempt}
}

// vars are the variables of an expression of r that reads steps (loaded).
func (o *outputsToRead) vars(r runOf, steps []string, spent *uint64) expr.Vars {
	v := expr.Vars{RunID: r.id.String(), ScheduledFor: r.scheduledFor, Trigger: r.trigger, Job: r.job, Namespace: r.ns,
		Attempt: r.attempt, Steps: make(map[string]expr.StepVars, len(steps)), Spent: spent}
	v.Params, v.Upstream, v.Event = jsonObject(r.params), jsonObject(r.upstream), jsonObject(r.event)
	if len(r.item) > 0 {
		v.Item, _ = expr.FromJSON(r.item)
	}
	v.ItemIndex = int(r.itemIndex)
	for _, s := range steps {
		if sv, ok := o.read[stepKey{r.id, s}]; ok {
			v.Steps[s] = sv
		}
	}
	return v
}

// jsonObject is a run's JSON object (params, upstream, event) as
// expressions read it: nil when there is none, or it is not an object.
func jsonObject(b []byte) map[string]any {
	if len(b) == 0 {
		return nil
	}
	m, err := expr.FromJSON(b)
	if err != nil {
		return nil
	}
	o, _ := m.(map[string]any)
	return o
}

// budgets are the expression cost budgets of a batch, one per run: the
// expressions a release evaluates for one run share one CostLimit (as a
// report's did when each was finished alone), and one run's cannot use
// up another's.
type budgets map[uuid.UUID]*uint64

// of is run's budget.
func (b budgets) of(run uuid.UUID) *uint64 {
	if b[run] == nil {
		b[run] = new(uint64)
	}
	return b[run]
}
