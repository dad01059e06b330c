package dag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/invopop/jsonschema"

	"github.com/orrery-dev/orrery/dag/expr"
	"github.com/orrery-dev/orrery/dag/schedule"
	"go.yaml.in/yaml/v3"
)

// Parked steps (docs/parked-steps.md): steps the engine runs without a
// worker, which wait until something ends them: a time (Sleep) or an
// event (Wait).

// Bounds of a sleep.
const (
	MinSleep = time.Second
	MaxSleep = 366 * 24 * time.Hour
)

// Sleep parks a step for a duration from its release, or until an
// instant: `sleep: 24h`, or `sleep: {until: "${{ EXPR }}"}` whose value
// (or the literal itself) is an RFC 3339 instant, evaluated when the step
// is released.
type Sleep struct {
	For   time.Duration `json:"-" yaml:"-"`
	Until string        `json:"until,omitempty" yaml:"until,omitempty"`
}

func (s Sleep) MarshalJSON() ([]byte, error) {
	if s.Until != "" {
		return json.Marshal(map[string]string{"until": s.Until})
	}
	return json.Marshal(s.For.String())
}

func (s Sleep) MarshalYAML() (any, error) {
	if s.Until != "" {
		return map[string]string{"until": s.Until}, nil
	}
	return s.For.String(), nil
}

var errSleepForm = errors.New(`sleep is a duration ("24h") or {until: RFC 3339 instant or "${{ EXPR }}"}`)

func (s *Sleep) UnmarshalJSON(b []byte) error {
	var d string
	if err := json.Unmarshal(b, &d); err == nil {
		return s.parseFor(d)
	}
	var obj struct {
		Until string `json:"until"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil || obj.Until == "" {
		return errSleepForm
	}
	*s = Sleep{Until: obj.Until}
	return nil
}

func (s *Sleep) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if err := s.parseFor(n.Value); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		return nil
	case yaml.MappingNode:
		if len(n.Content) == 2 && n.Content[0].Value == "until" && n.Content[1].Kind == yaml.ScalarNode && n.Content[1].Value != "" {
			*s = Sleep{Until: n.Content[1].Value}
			return nil
		}
	}
	return fmt.Errorf("line %d: %w", n.Line, errSleepForm)
}

func (s *Sleep) parseFor(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 30s, 10m or 24h", v)
	}
	*s = Sleep{For: d}
	return nil
}

// JSONSchema describes a Sleep: a duration, or {until}.
func (Sleep) JSONSchema() *jsonschema.Schema {
	until := jsonschema.NewProperties()
	until.Set("until", &jsonschema.Schema{Type: "string", Description: "an RFC 3339 instant, or ${{ EXPR }} of one, at most 366 days ahead"})
	return &jsonschema.Schema{OneOf: []*jsonschema.Schema{
		{Type: "string", Pattern: `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`, Description: "a Go duration from 1s to 8784h (366 days)"},
		{Type: "object", Properties: until, Required: []string{"until"}, AdditionalProperties: jsonschema.FalseSchema},
	}, Description: "park the step (no worker, no slot) for a duration from its release, or until an instant; its output is {until, time}"}
}

// Wait parks a step until an event of its type, published after it
// parked, for which match holds (a condition over event, the one arriving,
// and the run's variables: run.event is the run's own), or until its
// timeout, which fails it. Its output is the event.
type Wait struct {
	Event   string    `json:"event" yaml:"event"`
	Match   string    `json:"match,omitempty" yaml:"match,omitempty"`
	Timeout *Duration `json:"timeout" yaml:"timeout"`
}

// Parks reports whether the step is parked rather than run.
func (st *Step) Parks() bool { return st.Sleep != nil || st.Wait != nil }

// parkKind names what parks the step, as its fields are named.
func (st *Step) parkKind() string {
	if st.Wait != nil {
		return "wait"
	}
	return "sleep"
}

// OnNoWorker reports whether the engine runs the step itself, on no
// worker: a step that runs a job (its child run does the work) or a
// parked one. Such a step takes no slot, lease, resources or timeout.
func (st *Step) OnNoWorker() bool { return st.Run.Job != nil || st.Parks() }

// validateParked checks a parked step: its own bounds, and none of what
// only a step that runs somewhere takes.
func validateParked(es *Errors, p string, st *Step) {
	kind := st.parkKind()
	if st.Sleep != nil && st.Wait != nil {
		es.add(p+".wait", "a step sleeps or waits, not both")
	}
	if st.Run != (Executor{}) {
		es.add(p+".run", "a step that %ss runs nothing: give run or %s, not both", kind, kind)
	}
	if sl := st.Sleep; sl != nil {
		if sl.Until == "" && (sl.For < MinSleep || sl.For > MaxSleep) {
			es.add(p+".sleep", "%s is outside 1s..8784h (366 days)", sl.For)
		}
		if sl.Until != "" && !expr.HasExpr(sl.Until) {
			if _, err := time.Parse(time.RFC3339, sl.Until); err != nil {
				es.add(p+".sleep.until", "%q is neither an RFC 3339 instant nor ${{ EXPR }}", sl.Until)
			}
		}
	}
	if w := st.Wait; w != nil {
		if msg := schedule.ValidEventType(w.Event); msg != "" {
			es.add(p+".wait.event", "%s", msg)
		}
		switch {
		case w.Timeout == nil:
			es.add(p+".wait.timeout", "name how long the step waits at most (timeout: 72h), 1s to 8784h (366 days)")
		case w.Timeout.Duration < MinSleep || w.Timeout.Duration > MaxSleep:
			es.add(p+".wait.timeout", "%s is outside 1s..8784h (366 days)", w.Timeout.Duration)
		}
		if w.Match != "" && !expr.HasExpr(w.Match) {
			es.add(p+".wait.match", "a match is one ${{ EXPR }} of a boolean, over event (the event arriving) and the run's variables")
		}
		// match is compiled with the step's expressions (CompileExprs).
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"payload", len(st.Payload) > 0}, {"for_each", st.ForEach != ""}, {"retry", st.Retry != nil}, {"timeout", st.Timeout != nil},
		{"queue", st.Queue != ""}, {"priority", st.Priority != ""}, {"resources", st.Resources != nil}, {"resource_profile", st.ResourceProfile != ""},
	} {
		if f.set {
			es.add(p+"."+f.name, "a step that %ss runs nowhere: it takes no %s", kind, f.name)
		}
	}
}
