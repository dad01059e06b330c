package dag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/invopop/jsonschema"

	"github.com/orrery-dev/orrery/dag/expr"
	"github.com/orrery-dev/orrery/dag/schedule"
	"go.yaml.in/yaml/v3"
)

// Parked steps (docs/parked-steps.md): steps the engine runs without a
// worker, which wait until something ends them: a time (Sleep), an event
// (Wait) or people's decision (Approval).

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
	// OnTimeout is what the timeout does: fail the step (the default) or
	// skip it (its all_success children are skipped too).
	OnTimeout OnTimeout `json:"on_timeout,omitempty" yaml:"on_timeout,omitempty" jsonschema:"enum=fail,enum=skip,default=fail"`
}

// OnTimeout is what a parked step's timeout does to it.
type OnTimeout string

// What a timeout does.
const (
	TimeoutFails OnTimeout = "fail" // the default
	TimeoutSkips OnTimeout = "skip"
)

// Approval parks a step until people decide: Count approvals from
// distinct principals holding Role on the run's job (and named in
// Principals, when it names any) end it succeeded; one rejection fails
// it; Timeout fails or skips it (OnTimeout). With Separate, whoever
// triggered the run may not decide on it. Message (text, or ${{ EXPR }}
// in it) is rendered when the step parks and shown to the deciders. Its
// output is the decision: who, when, with what comment.
type Approval struct {
	Role       string    `json:"role,omitempty" yaml:"role,omitempty" jsonschema:"enum=reader,enum=editor,enum=admin,default=editor"`
	Principals []string  `json:"principals,omitempty" yaml:"principals,omitempty"`
	Count      int       `json:"count,omitempty" yaml:"count,omitempty" jsonschema:"minimum=1,maximum=10,default=1"`
	Separate   bool      `json:"separate,omitempty" yaml:"separate,omitempty"`
	Timeout    *Duration `json:"timeout" yaml:"timeout"`
	OnTimeout  OnTimeout `json:"on_timeout,omitempty" yaml:"on_timeout,omitempty" jsonschema:"enum=fail,enum=skip,default=fail"`
	Message    string    `json:"message,omitempty" yaml:"message,omitempty"`
}

// Bounds of an approval.
const (
	MaxApprovals          = 10   // count
	MaxApprovalPrincipals = 100  // principals
	MaxApprovalMessage    = 2048 // message, as written and as rendered
)

// Approvers is how many approvals end the approval (count, 1 by default).
func (a *Approval) Approvers() int { return max(a.Count, 1) }

// DecidedBy is the role a decider needs (role, editor by default).
func (a *Approval) DecidedBy() string {
	if a.Role == "" {
		return "editor"
	}
	return a.Role
}

// Parks reports whether the step is parked rather than run.
func (st *Step) Parks() bool { return st.Sleep != nil || st.Wait != nil || st.Approval != nil }

// ParkTimeout is what a parked step's timeout does ("": it has none, a
// sleep).
func (st *Step) ParkTimeout() OnTimeout {
	var o OnTimeout
	switch {
	case st.Wait != nil:
		o = st.Wait.OnTimeout
	case st.Approval != nil:
		o = st.Approval.OnTimeout
	default:
		return ""
	}
	if o == "" {
		return TimeoutFails
	}
	return o
}

// parkVerbs say what a parked step of each kind does.
var parkVerbs = map[string]string{"sleep": "sleeps", "wait": "waits", "approval": "asks for an approval"}

// parkKind names what parks the step, as its fields are named.
func (st *Step) parkKind() string {
	switch {
	case st.Wait != nil:
		return "wait"
	case st.Approval != nil:
		return "approval"
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
	if n := btoi(st.Sleep != nil) + btoi(st.Wait != nil) + btoi(st.Approval != nil); n > 1 {
		es.add(p+"."+kind, "a step sleeps, waits or asks for an approval: one of them")
	}
	if st.Run != (Executor{}) {
		es.add(p+".run", "a step that %s runs nothing: give run or %s, not both", parkVerbs[kind], kind)
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
		validateParkTimeout(es, p+".wait.timeout", w.Timeout, "72h")
		if w.Match != "" && !expr.HasExpr(w.Match) {
			es.add(p+".wait.match", "a match is one ${{ EXPR }} of a boolean, over event (the event arriving) and the run's variables")
		}
		// match is compiled with the step's expressions (CompileExprs).
		validateOnTimeout(es, p+".wait.on_timeout", w.OnTimeout)
	}
	if a := st.Approval; a != nil {
		validateApproval(es, p+".approval", a)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"payload", len(st.Payload) > 0}, {"for_each", st.ForEach != ""}, {"retry", st.Retry != nil}, {"timeout", st.Timeout != nil},
		{"queue", st.Queue != ""}, {"priority", st.Priority != ""}, {"resources", st.Resources != nil}, {"resource_profile", st.ResourceProfile != ""},
	} {
		if f.set {
			es.add(p+"."+f.name, "a step that %s runs nowhere: it takes no %s", parkVerbs[kind], f.name)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// validateParkTimeout checks a wait's or an approval's timeout: required,
// 1 s to 366 days.
func validateParkTimeout(es *Errors, p string, d *Duration, example string) {
	switch {
	case d == nil:
		es.add(p, "name how long the step waits at most (timeout: %s), 1s to 8784h (366 days)", example)
	case d.Duration < MinSleep || d.Duration > MaxSleep:
		es.add(p, "%s is outside 1s..8784h (366 days)", d.Duration)
	}
}

func validateOnTimeout(es *Errors, p string, o OnTimeout) {
	if o != "" && o != TimeoutFails && o != TimeoutSkips {
		es.add(p, "%q is neither fail nor skip", o)
	}
}

// validateApproval checks an approval's fields (its message's expressions
// are compiled with the step's, CompileExprs).
func validateApproval(es *Errors, p string, a *Approval) {
	switch a.Role {
	case "", "reader", "editor", "admin":
	default:
		es.add(p+".role", "%q is not a role that may decide: reader, editor or admin", a.Role)
	}
	if len(a.Principals) > MaxApprovalPrincipals {
		es.add(p+".principals", "names %d principals; the limit is %d", len(a.Principals), MaxApprovalPrincipals)
	}
	seen := map[string]bool{}
	for i, name := range a.Principals {
		switch {
		case name == "" || len(name) > 200 || !IsText(name) || strings.TrimSpace(name) != name:
			es.add(fmt.Sprintf("%s.principals[%d]", p, i), "a principal's name: 1 to 200 bytes of text, without spaces around it")
		case seen[name]:
			es.add(fmt.Sprintf("%s.principals[%d]", p, i), "%q is named twice", name)
		}
		seen[name] = true
	}
	switch {
	case a.Count < 0 || a.Count > MaxApprovals:
		es.add(p+".count", "%d is outside 1..%d", a.Count, MaxApprovals)
	case len(a.Principals) > 0 && a.Approvers() > len(a.Principals):
		es.add(p+".count", "needs %d approvals from distinct principals, but principals names %d", a.Approvers(), len(a.Principals))
	}
	validateParkTimeout(es, p+".timeout", a.Timeout, "24h")
	validateOnTimeout(es, p+".on_timeout", a.OnTimeout)
	switch {
	case len(a.Message) > MaxApprovalMessage:
		es.add(p+".message", "is %d bytes; the limit is %d", len(a.Message), MaxApprovalMessage)
	case !IsText(a.Message):
		es.add(p+".message", "is not text (a NUL character or invalid UTF-8)")
	}
}
