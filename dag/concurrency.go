package dag

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/orrery-dev/orrery/dag/expr"
)

// Job-level concurrency keys (docs/flow-control.md): a job's runs hold
// their keys from their creation as pending until they end, and at most
// Limit of them hold a key at once.

// ConcurrencyLimit bounds the job's runs that hold one key: Key is text
// or ${{ EXPR }} in it over the run's params, its event and run (as it is
// created), Limit how many runs may hold one value of it, OnLimit what a
// new run does when the value is at its limit.
type ConcurrencyLimit struct {
	Key     string  `json:"key" yaml:"key"`
	Limit   int     `json:"limit" yaml:"limit" jsonschema:"minimum=1,maximum=10000"`
	OnLimit OnLimit `json:"on_limit,omitempty" yaml:"on_limit,omitempty" jsonschema:"enum=queue,enum=cancel_newest,enum=cancel_running,default=queue"`
}

// OnLimit is what a new run does when a key it holds is at its limit.
type OnLimit string

// What a run does at a key's limit.
const (
	// OnLimitQueue writes it queued: it starts when a run of its key
	// ends, the oldest first (the default).
	OnLimitQueue OnLimit = "queue"
	// OnLimitCancelNewest writes it cancelled.
	OnLimitCancelNewest OnLimit = "cancel_newest"
	// OnLimitCancelRunning cancels the oldest runs holding the key, to
	// make room for it.
	OnLimitCancelRunning OnLimit = "cancel_running"
)

// Bounds of concurrency keys.
const (
	MaxConcurrencyKeys  = 4
	MaxConcurrencyLimit = 10_000
	// MaxKeyValue bounds a key's value, as it evaluates.
	MaxKeyValue = 256
)

// HoldsRuns reports whether the job holds new runs back (queued) while
// others run: overlap: queue, or concurrency keys. A run's end then
// starts what it held.
func (s *JobSpec) HoldsRuns() bool { return s.Overlap == OverlapQueue || len(s.Concurrency) > 0 }

// Action is what the limit does at its limit (OnLimit, queue when empty).
func (c ConcurrencyLimit) Action() OnLimit {
	if c.OnLimit == "" {
		return OnLimitQueue
	}
	return c.OnLimit
}

// ConcurrencyKeys are a job's concurrency keys, compiled (nil when it has
// none).
type ConcurrencyKeys struct {
	env   *expr.Env
	limit []ConcurrencyLimit
	tmpl  []expr.Template
	progs [][]*expr.Program
}

// CompileConcurrencyKeys compiles s's concurrency keys against its params
// (a key reads params, event and run; no step exists yet). Errors name
// the field.
func CompileConcurrencyKeys(s *JobSpec) (*ConcurrencyKeys, Errors) {
	if len(s.Concurrency) == 0 {
		return nil, nil
	}
	env, err := expr.NewEnv(s.ParamTypes(), nil, nil)
	if err != nil {
		return nil, Errors{&FieldError{Field: "spec.params", Message: err.Error()}}
	}
	k := &ConcurrencyKeys{env: env, limit: s.Concurrency}
	var es Errors
	for i, c := range s.Concurrency {
		field := fmt.Sprintf("spec.concurrency[%d].key", i)
		t, err := expr.Parse(c.Key)
		var progs []*expr.Program
		if err == nil && t.Exprs() > 0 {
			progs, _, err = env.CompileTemplate(t, map[string]bool{})
		}
		if err != nil {
			es = append(es, fieldError(field, err))
			continue
		}
		k.tmpl, k.progs = append(k.tmpl, t), append(k.progs, progs)
	}
	if len(es) > 0 {
		return nil, es
	}
	return k, nil
}

// Limits are the keys' limits, in the order Values gives their values.
func (k *ConcurrencyKeys) Limits() []ConcurrencyLimit { return k.limit }

// Values evaluates the keys for a run being created (vars: its params,
// event, instant and trigger): a value a key each, text of at most
// MaxKeyValue bytes without control characters. Its error names the key.
func (k *ConcurrencyKeys) Values(vars expr.Vars) ([]string, error) {
	if k == nil {
		return nil, nil
	}
	a := k.env.Activation(vars)
	out := make([]string, len(k.tmpl))
	for i, t := range k.tmpl {
		field := fmt.Sprintf("concurrency[%d].key", i)
		v, err := expr.Render(t, k.progs[i], a)
		if err != nil {
			return nil, &ApplyError{Field: field, Err: err}
		}
		s, ok := v.(string)
		if !ok {
			var b strings.Builder
			if err := expr.Text(&b, v); err != nil {
				return nil, &ApplyError{Field: field, Err: err}
			}
			s = b.String()
		}
		switch {
		case s == "":
			return nil, &ApplyError{Field: field, Err: errors.New("evaluates to empty text")}
		case len(s) > MaxKeyValue:
			return nil, &ApplyError{Field: field, Err: fmt.Errorf("evaluates to %d bytes; a key is at most %d", len(s), MaxKeyValue)}
		case !IsText(s) || strings.IndexFunc(s, unicode.IsControl) >= 0:
			return nil, &ApplyError{Field: field, Err: errors.New("evaluates to text with a control character")}
		}
		out[i] = s
	}
	return out, nil
}

// validateConcurrency checks a job's concurrency keys (their expressions
// compile in CompileConcurrencyKeys, called by prepare).
func validateConcurrency(es *Errors, s *JobSpec) {
	if len(s.Concurrency) == 0 {
		return
	}
	if len(s.Concurrency) > MaxConcurrencyKeys {
		es.add("spec.concurrency", "names %d keys; the limit is %d", len(s.Concurrency), MaxConcurrencyKeys)
	}
	if s.Overlap != OverlapAllow {
		es.add("spec.overlap", "a job with concurrency keys runs with overlap: allow (its keys decide what waits), not %s", s.Overlap)
	}
	for i, c := range s.Concurrency {
		p := fmt.Sprintf("spec.concurrency[%d]", i)
		switch {
		case c.Key == "":
			es.add(p+".key", "name the key: text, or ${{ EXPR }} in it over params, event and run")
		case len(c.Key) > 1024:
			es.add(p+".key", "is %d bytes; the limit is 1024", len(c.Key))
		}
		if c.Limit < 1 || c.Limit > MaxConcurrencyLimit {
			es.add(p+".limit", "%d is outside 1..%d", c.Limit, MaxConcurrencyLimit)
		}
		switch c.OnLimit {
		case "", OnLimitQueue, OnLimitCancelNewest, OnLimitCancelRunning:
		default:
			es.add(p+".on_limit", "%q is not one of queue, cancel_newest, cancel_running", c.OnLimit)
		}
	}
	if _, xes := CompileConcurrencyKeys(s); len(xes) > 0 {
		*es = append(*es, xes...)
	}
}
