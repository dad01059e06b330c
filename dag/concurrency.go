package dag

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/orrery-dev/orrery/dag/expr"
)

// Concurrency keys (docs/flow-control.md). Job level: a job's runs hold
// their keys from their creation as pending until they end, and at most
// Limit of them hold a key at once. Step level: a step's tasks hold their
// keys (the tenant's: every job naming a value shares it) from their
// release until they end.

// ConcurrencyLimit bounds the job's runs that hold one key: Key is text
// or ${{ EXPR }} in it over the run's params, its event and run (as it is
// created), Limit how many runs may hold one value of it, OnLimit what a
// new run does when the value is at its limit.
type ConcurrencyLimit struct {
	Key     string  `json:"key" yaml:"key"`
	Limit   int     `json:"limit" yaml:"limit" jsonschema:"minimum=1,maximum=10000"`
	OnLimit OnLimit `json:"on_limit,omitempty" yaml:"on_limit,omitempty" jsonschema:"enum=queue,enum=cancel_newest,enum=cancel_running,default=queue"`
}

// RateLimit is a step's rate limit: Key is text or ${{ EXPR }} in it
// over the run's params, its event, run and its ancestors' outputs (as
// the step is released), Limit how many of the tasks naming one value of
// it may start per Per (a token bucket: Limit at once after a quiet Per,
// then one every Per/Limit).
type RateLimit struct {
	Key   string   `json:"key" yaml:"key"`
	Limit int      `json:"limit" yaml:"limit" jsonschema:"minimum=1,maximum=10000"`
	Per   Duration `json:"per" yaml:"per"`
}

// Interval is the time between two tokens of the limit's bucket.
func (r *RateLimit) Interval() time.Duration { return r.Per.Duration / time.Duration(r.Limit) }

// Bounds of a rate limit's period.
const (
	MinRatePer = time.Second
	MaxRatePer = 24 * time.Hour
)

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

// WeighsActiveRuns reports whether a new run's status depends on the
// job's active runs (its overlap policy is not allow): only then need
// they be read.
func (s *JobSpec) WeighsActiveRuns() bool { return s.Overlap != OverlapAllow }

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
	k := &ConcurrencyKeys{env: env}
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

// Values evaluates the keys for a run being created (vars: its params,
// event, instant and trigger): a value a key each, text of at most
// MaxKeyValue bytes without control characters. Its error names the key.
func (k *ConcurrencyKeys) Values(vars expr.Vars) ([]string, error) {
	if k == nil {
		return nil, nil
	}
	return keyValues(k.tmpl, k.progs, k.env.Activation(vars))
}

// keyValues renders keys (their templates and programs) with a: a value
// a key each, text of at most MaxKeyValue bytes without control
// characters. Its error names the key (concurrency[i].key).
func keyValues(tmpl []expr.Template, progs [][]*expr.Program, a expr.Activation) ([]string, error) {
	out := make([]string, len(tmpl))
	for i, t := range tmpl {
		v, err := keyValue(fmt.Sprintf("concurrency[%d].key", i), t, progs[i], a)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// keyValue renders one key (field names it in the error) and checks its
// value: text, not empty, at most MaxKeyValue bytes, no control character.
func keyValue(field string, t expr.Template, progs []*expr.Program, a expr.Activation) (string, error) {
	v, err := expr.Render(t, progs, a)
	if err != nil {
		return "", &ApplyError{Field: field, Err: err}
	}
	s, ok := v.(string)
	if !ok {
		var b strings.Builder
		if err := expr.Text(&b, v); err != nil {
			return "", &ApplyError{Field: field, Err: err}
		}
		s = b.String()
	}
	switch {
	case s == "":
		return "", &ApplyError{Field: field, Err: errors.New("evaluates to empty text")}
	case len(s) > MaxKeyValue:
		return "", &ApplyError{Field: field, Err: fmt.Errorf("evaluates to %d bytes; a key is at most %d", len(s), MaxKeyValue)}
	case !IsText(s) || strings.IndexFunc(s, unicode.IsControl) >= 0:
		return "", &ApplyError{Field: field, Err: errors.New("evaluates to text with a control character")}
	}
	return s, nil
}

// validateConcurrency checks a job's concurrency keys (their expressions
// compile in CompileConcurrencyKeys, called by prepare).
func validateConcurrency(es *Errors, s *JobSpec) {
	for i := range s.Steps {
		validateStepConcurrency(es, &s.Steps[i], fmt.Sprintf("spec.steps[%d]", i))
	}
	if len(s.Concurrency) == 0 {
		return
	}
	if s.Overlap != OverlapAllow {
		es.add("spec.overlap", "a job with concurrency keys runs with overlap: allow (its keys decide what waits), not %s", s.Overlap)
	}
	validateLimits(es, s.Concurrency, "spec.concurrency", "params, event and run", true)
	if _, xes := CompileConcurrencyKeys(s); len(xes) > 0 {
		*es = append(*es, xes...)
	}
}

// validateStepConcurrency checks a step's concurrency keys and rate limit
// (p: the step's field); their expressions compile with the step's
// (CompileExprs).
func validateStepConcurrency(es *Errors, st *Step, p string) {
	if len(st.Concurrency) == 0 && st.RateLimit == nil {
		return
	}
	kind := ""
	switch {
	case st.ForEach != "":
		kind = "fans out (for_each): keys over its items are not built"
	case st.Run.Job != nil:
		kind = "runs a job (run.job): its child run's steps hold the worker slots; give them the keys, or the child job spec.concurrency"
	case st.Sleep != nil || st.Wait != nil || st.Approval != nil:
		kind = "parks (sleep, wait or approval): it holds no worker slot a key could bound"
	}
	const reads = "params, event, run and its ancestors' outputs"
	if len(st.Concurrency) > 0 {
		if kind != "" {
			es.add(p+".concurrency", "a step that %s", kind)
		} else {
			validateLimits(es, st.Concurrency, p+".concurrency", reads, false)
		}
	}
	r := st.RateLimit
	if r == nil {
		return
	}
	f := p + ".rate_limit"
	if kind != "" {
		es.add(f, "a step that %s", strings.Replace(kind, "a key could bound", "a rate limit could bound", 1))
		return
	}
	switch {
	case r.Key == "":
		es.add(f+".key", "name the key: text, or ${{ EXPR }} in it over %s", reads)
	case len(r.Key) > 1024:
		es.add(f+".key", "is %d bytes; the limit is 1024", len(r.Key))
	}
	if r.Limit < 1 || r.Limit > MaxConcurrencyLimit {
		es.add(f+".limit", "%d is outside 1..%d", r.Limit, MaxConcurrencyLimit)
	}
	if r.Per.Duration < MinRatePer || r.Per.Duration > MaxRatePer {
		es.add(f+".per", "%s is outside %s..%s", r.Per.Duration, MinRatePer, MaxRatePer)
	}
}

// validateLimits checks a list of concurrency limits at field p: their
// number, keys, limits and on_limit (any of the three when all is true, else
// queue only: a step's task at a limit waits).
func validateLimits(es *Errors, ls []ConcurrencyLimit, p, reads string, all bool) {
	if len(ls) > MaxConcurrencyKeys {
		es.add(p, "names %d keys; the limit is %d", len(ls), MaxConcurrencyKeys)
	}
	for i, c := range ls {
		f := fmt.Sprintf("%s[%d]", p, i)
		switch {
		case c.Key == "":
			es.add(f+".key", "name the key: text, or ${{ EXPR }} in it over %s", reads)
		case len(c.Key) > 1024:
			es.add(f+".key", "is %d bytes; the limit is 1024", len(c.Key))
		}
		if c.Limit < 1 || c.Limit > MaxConcurrencyLimit {
			es.add(f+".limit", "%d is outside 1..%d", c.Limit, MaxConcurrencyLimit)
		}
		switch {
		case c.OnLimit == "" || c.OnLimit == OnLimitQueue:
		case !all:
			es.add(f+".on_limit", "%q: a step's task at a key's limit waits (queue); cancel_newest and cancel_running are for the job's runs (spec.concurrency)", c.OnLimit)
		case c.OnLimit != OnLimitCancelNewest && c.OnLimit != OnLimitCancelRunning:
			es.add(f+".on_limit", "%q is not one of queue, cancel_newest, cancel_running", c.OnLimit)
		}
	}
}
