package dag

import (
	"errors"

	"github.com/orrery-dev/orrery/dag/expr"
)

// An EventFilter is a job's schedule.event filter, compiled: a condition
// over the event (docs/events.md).
type EventFilter struct {
	env *expr.Env
	prg *expr.Program
}

// CompileEventFilter compiles a filter: one whole ${{ }} of a bool, which
// reads event (no params or steps: a run does not exist yet). An empty
// filter matches every event. Its error is an *expr.Error whose Offset is
// within src.
func CompileEventFilter(src string) (*EventFilter, error) {
	env, err := expr.NewEnv(nil, nil, nil)
	if err != nil {
		return nil, err
	}
	if src == "" {
		return &EventFilter{env: env}, nil
	}
	prg, err := compileWhen(env, src, map[string]bool{})
	if err != nil {
		return nil, err
	}
	return &EventFilter{env: env, prg: prg}, nil
}

// Match evaluates the filter for event (a JSON object: id, type, source,
// time, data); its cost is bounded as every expression's.
func (f *EventFilter) Match(event map[string]any) (bool, error) {
	if f.prg == nil {
		return true, nil
	}
	return f.prg.Condition(f.env.Activation(expr.Vars{Event: event}))
}

// validateEvent checks schedule.event's filter (its type: schedule.Parse).
func validateEvent(es *Errors, r *Resource) {
	e := r.Spec.Schedule.Event
	if e == nil || e.Filter == "" {
		return
	}
	if _, err := CompileEventFilter(e.Filter); err != nil {
		fe := &FieldError{Field: "spec.schedule.event.filter", Message: err.Error()}
		var xe *expr.Error
		if errors.As(err, &xe) {
			fe.Offset = xe.Offset
		}
		*es = append(*es, fe)
	}
}
