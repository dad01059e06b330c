package dag

import (
	"time"

	"github.com/orrery-dev/orrery/dag/expr"
)

// Debounce collapses a job's triggers (manual, events, upstream runs'
// ends) of one key value into one run (docs/flow-control.md, "Debounce"):
// the first writes the run queued, to start Period after it; each later
// one within that time gives the run its params (and event) and puts the
// start off to Period after it, but never past MaxWait after the first
// (when MaxWait is set). Key is text or ${{ EXPR }} in it over the
// trigger's params, its event and run; empty, the job has one debounce.
type Debounce struct {
	Key     string   `json:"key,omitempty" yaml:"key,omitempty"`
	Period  Duration `json:"period" yaml:"period"`
	MaxWait Duration `json:"max_wait,omitzero" yaml:"max_wait,omitempty"`
}

// Bounds of a debounce.
const (
	MinDebouncePeriod = time.Second
	MaxDebouncePeriod = 24 * time.Hour
	// MaxDebounceWait bounds max_wait: a run debounced at most a week.
	MaxDebounceWait = 7 * 24 * time.Hour
)

// DebounceKey is a job's debounce key, compiled (nil when the job has no
// debounce, or its key is plain text).
type DebounceKey struct {
	env   *expr.Env
	tmpl  expr.Template
	progs []*expr.Program
}

// CompileDebounceKey compiles s's debounce key against its params (it
// reads params, event and run, as a job-level concurrency key does).
// Errors name the field.
func CompileDebounceKey(s *JobSpec) (*DebounceKey, Errors) {
	if s.Debounce == nil || s.Debounce.Key == "" {
		return nil, nil
	}
	const field = "spec.debounce.key"
	env, err := expr.NewEnv(s.ParamTypes(), nil, nil)
	if err != nil {
		return nil, Errors{&FieldError{Field: "spec.params", Message: err.Error()}}
	}
	t, err := expr.Parse(s.Debounce.Key)
	var progs []*expr.Program
	if err == nil && t.Exprs() > 0 {
		progs, _, err = env.CompileTemplate(t, map[string]bool{})
	}
	if err != nil {
		return nil, Errors{fieldError(field, err)}
	}
	return &DebounceKey{env: env, tmpl: t, progs: progs}, nil
}

// Value evaluates the key for a trigger (vars: its params, event, instant
// and trigger): text of at most MaxKeyValue bytes without control
// characters ("" for a job without a key). Its error names the key.
func (k *DebounceKey) Value(vars expr.Vars) (string, error) {
	if k == nil {
		return "", nil
	}
	return keyValue("debounce.key", k.tmpl, k.progs, k.env.Activation(vars))
}

// Wait is how long after the first trigger its run may be put off at
// most (0: without end).
func (d *Debounce) Wait() time.Duration { return d.MaxWait.Duration }

// validateDebounce checks a job's debounce: its period, max_wait and key.
func validateDebounce(es *Errors, s *JobSpec) {
	d := s.Debounce
	if d == nil {
		return
	}
	const p = "spec.debounce"
	if d.Period.Duration < MinDebouncePeriod || d.Period.Duration > MaxDebouncePeriod {
		es.add(p+".period", "%s is outside %s..%s", d.Period.Duration, MinDebouncePeriod, MaxDebouncePeriod)
	}
	if w := d.MaxWait.Duration; w != 0 && (w < d.Period.Duration || w > MaxDebounceWait) {
		es.add(p+".max_wait", "%s is outside the period (%s)..%s", w, d.Period.Duration, MaxDebounceWait)
	}
	if len(d.Key) > 1024 {
		es.add(p+".key", "is %d bytes; the limit is 1024", len(d.Key))
		return
	}
	if _, xes := CompileDebounceKey(s); len(xes) > 0 {
		*es = append(*es, xes...)
	}
}
