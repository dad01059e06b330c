package dag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/orrery-dev/orrery/dag/expr"
)

// The `${{ }}` expressions of a job's steps (package expr): where they may
// appear, checked when a job is validated, evaluated when an attempt
// starts (docs/workflows.md).

// MaxExprs bounds the expressions of one job.
const MaxExprs = 1000

// Exprs are the compiled expressions of a job version's steps.
type Exprs struct {
	steps map[string]*StepExprs
}

// Step is the compiled expressions of one step; nil when it has none.
func (x *Exprs) Step(name string) *StepExprs {
	if x == nil {
		return nil
	}
	return x.steps[name]
}

// StepExprs are one step's compiled expressions, by the text of the field
// that holds them.
type StepExprs struct {
	env       *expr.Env
	templates map[string]compiled
	// Reads is what the step's expressions in its executor and payload
	// read (Apply), for the caller to load.
	Reads expr.Reads
	when  *expr.Program
	// WhenReads is what its condition reads (Condition).
	WhenReads expr.Reads
	forEach   *expr.Program
	// ForEachReads is what its fan-out's list reads (Items).
	ForEachReads expr.Reads
	match        *expr.Program
	// MatchReads is what its wait's match reads (Match, WaitKey).
	MatchReads expr.Reads
	matchKey   *expr.MatchKey // its indexed half, if it has one
	keys       []compiled     // its concurrency keys, in their order
	limits     []int
	rateKey    *compiled  // its rate limit's key
	rate       *RateLimit // its rate limit
	// KeysReads is what its concurrency keys read (Keys).
	KeysReads expr.Reads
}

// WaitKey is the key a parked wait is found by (expr.Key: its match's
// indexed half evaluated with vars) and its path (expr.PathKey), or ""
// and "" when its match has none, or its value is no key or does not
// evaluate (the wait is then asked about every event of its type).
func (x *StepExprs) WaitKey(vars expr.Vars) (key, path string) {
	if x == nil || x.matchKey == nil {
		return "", ""
	}
	v, err := x.matchKey.Value.Eval(x.env.Activation(vars))
	if err != nil {
		return "", ""
	}
	k, ok := expr.Key(x.matchKey.Path, v)
	if !ok {
		return "", ""
	}
	return k, expr.PathKey(x.matchKey.Path)
}

// Match decides a waiting step's match for the event arriving (vars'
// Incoming): true without a match.
func (x *StepExprs) Match(vars expr.Vars) (bool, error) {
	if x == nil || x.match == nil {
		return true, nil
	}
	ok, err := x.match.Condition(x.env.Activation(vars))
	if err != nil {
		return false, &ApplyError{Field: "wait.match", Err: err}
	}
	return ok, nil
}

type compiled struct {
	tmpl  expr.Template
	progs []*expr.Program
}

// HasExprs reports whether any step of s holds an expression.
func (s *JobSpec) HasExprs() bool {
	for i := range s.Steps {
		st := &s.Steps[i]
		if st.When != "" || st.ForEach != "" || len(st.Concurrency) > 0 || st.RateLimit != nil || (st.Wait != nil && st.Wait.Match != "") || bytes.Contains(st.Payload, []byte(expr.Open)) {
			return true
		}
		found := false
		eachField(st, func(_ string, v string, _ bool) { found = found || expr.HasExpr(v) })
		if found {
			return true
		}
	}
	return false
}

// CompileExprs compiles the expressions of every step of s (nil when it
// has none): each checked against the params and the step's ancestors.
// The errors name the field and, in FieldError.Offset, where in it.
func CompileExprs(s *JobSpec) (*Exprs, Errors) {
	if !s.HasExprs() {
		return nil, nil
	}
	var es Errors
	var groups []string
	for _, st := range s.Steps {
		if st.ForEach != "" {
			groups = append(groups, st.Name)
		}
	}
	env, err := expr.NewEnv(s.ParamTypes(), stepNames(s.Steps), groups)
	if err != nil {
		es.add("spec.params", "%v", err)
		return nil, es
	}
	x := &Exprs{steps: map[string]*StepExprs{}}
	count := 0
	for i := range s.Steps {
		st := &s.Steps[i]
		var ancestors map[string]bool
		se := &StepExprs{env: env, templates: map[string]compiled{}}
		eachTemplate(st, func(path, v string, secretOK bool) {
			if !expr.HasExpr(v) {
				return
			}
			field := fmt.Sprintf("spec.steps[%d].%s", i, path)
			t, err := expr.Parse(v)
			if err == nil {
				err = checkPlace(path, t, secretOK) // in every field, also one whose text was compiled for another
			}
			if err == nil {
				if _, done := se.templates[v]; done {
					return
				}
				var progs []*expr.Program
				var reads expr.Reads
				if t.Exprs() > 0 { // none: only escaped $${{, text
					count += t.Exprs()
					if count > MaxExprs && count-t.Exprs() <= MaxExprs {
						es = append(es, &FieldError{Field: field, Message: fmt.Sprintf("brings the job's expressions to %d; the limit is %d", count, MaxExprs)})
					}
					if ancestors == nil {
						ancestors = ancestorsOf(s.Steps, i)
					}
					progs, reads, err = env.CompileTemplate(t, ancestors)
					if err == nil && reads.Item && st.ForEach == "" {
						err = errors.New("item and item_index are read only by a step with for_each")
					}
				}
				if err == nil {
					se.templates[v] = compiled{t, progs}
					se.Reads.Add(reads)
					return
				}
			}
			es = append(es, fieldError(field, err))
		})
		// one compiles a whole-expression field of the step (its
		// condition, a wait's match, its fan-out's list), counted and
		// checked against its ancestors; nil when it is refused.
		one := func(name, src string, compile func(*expr.Env, string, map[string]bool) (*expr.Program, error), noItem string) *expr.Program {
			if ancestors == nil {
				ancestors = ancestorsOf(s.Steps, i)
			}
			count++
			prg, err := compile(env, src, ancestors)
			if err == nil && noItem != "" && prg.Reads.Item {
				err = errors.New(noItem)
			}
			if err != nil {
				es = append(es, fieldError(fmt.Sprintf("spec.steps[%d].%s", i, name), err))
				return nil
			}
			return prg
		}
		if st.When != "" {
			if prg := one("when", st.When, compileWhen, "a condition is decided once for the step, before its items exist: it cannot read item or item_index"); prg != nil {
				se.when, se.WhenReads = prg, prg.Reads
			}
		}
		if w := st.Wait; w != nil && w.Match != "" {
			if prg := one("wait.match", w.Match, compileWhen, "a wait's match cannot read item or item_index"); prg != nil {
				se.match, se.MatchReads = prg, prg.Reads
				if t, err := expr.Parse(w.Match); err == nil && t.Whole() {
					se.matchKey = env.SplitMatch(t[0].Source, ancestors)
				}
			}
		}
		if st.ForEach != "" {
			if prg := one("for_each", st.ForEach, compileForEach, ""); prg != nil {
				se.forEach, se.ForEachReads = prg, prg.Reads
			}
		}
		// key compiles a key of the step (a concurrency key, its rate
		// limit's), counted and checked against its ancestors, and adds
		// what it reads to KeysReads; false when it is refused.
		key := func(field, src string) (compiled, bool) {
			t, err := expr.Parse(src)
			var progs []*expr.Program
			var reads expr.Reads
			if err == nil && t.Exprs() > 0 {
				count += t.Exprs()
				if ancestors == nil {
					ancestors = ancestorsOf(s.Steps, i)
				}
				progs, reads, err = env.CompileTemplate(t, ancestors)
				if err == nil && reads.Item {
					err = errors.New("a step's keys are decided at its release, not per item: they cannot read item or item_index")
				}
			}
			if err != nil {
				es = append(es, fieldError(field, err))
				return compiled{}, false
			}
			se.KeysReads.Add(reads)
			return compiled{t, progs}, true
		}
		for j, c := range st.Concurrency {
			if k, ok := key(fmt.Sprintf("spec.steps[%d].concurrency[%d].key", i, j), c.Key); ok {
				se.keys = append(se.keys, k)
				se.limits = append(se.limits, c.Limit)
			}
		}
		if r := st.RateLimit; r != nil {
			if k, ok := key(fmt.Sprintf("spec.steps[%d].rate_limit.key", i), r.Key); ok {
				se.rateKey, se.rate = &k, r
			}
		}
		if len(se.templates) > 0 || se.when != nil || se.forEach != nil || se.match != nil || len(se.keys) > 0 || se.rateKey != nil {
			x.steps[st.Name] = se
		}
	}
	if len(es) > 0 {
		return nil, es
	}
	return x, nil
}

// fieldError names field in err, with the offset in its text of an
// expression's error.
func fieldError(field string, err error) *FieldError {
	fe := &FieldError{Field: field, Message: err.Error()}
	var xe *expr.Error
	if errors.As(err, &xe) {
		fe.Offset = xe.Offset
	}
	return fe
}

// compileWhen compiles a step's condition: one whole ${{ }} of a bool.
func compileWhen(env *expr.Env, when string, ancestors map[string]bool) (*expr.Program, error) {
	t, err := expr.Parse(when)
	if err != nil {
		return nil, err
	}
	if !t.Whole() {
		return nil, errors.New("a condition is one ${{ EXPR }} and nothing else")
	}
	prg, err := env.CompileCondition(t[0].Source, ancestors)
	var xe *expr.Error
	if errors.As(err, &xe) {
		xe.Offset += t[0].Offset
	}
	return prg, err
}

// compileForEach compiles a fan-out's list: one whole ${{ }} of a list,
// which cannot read the items it makes.
func compileForEach(env *expr.Env, src string, ancestors map[string]bool) (*expr.Program, error) {
	t, err := expr.Parse(src)
	if err != nil {
		return nil, err
	}
	if !t.Whole() {
		return nil, errors.New("for_each is one ${{ EXPR }} of a list and nothing else")
	}
	prg, err := env.CompileList(t[0].Source, ancestors)
	var xe *expr.Error
	if errors.As(err, &xe) {
		xe.Offset += t[0].Offset
	}
	if err == nil && prg.Reads.Item {
		return nil, errors.New("for_each makes the items: it cannot read item or item_index")
	}
	return prg, err
}

// Items evaluates the step's fan-out list (for_each) with vars: at most
// maxItems elements (the list at most expr.MaxItemsJSON as JSON), each
// returned in its JSON form; an element holding a NUL character (which
// PostgreSQL's jsonb does not store) is refused.
func (x *StepExprs) Items(vars expr.Vars, maxItems int) ([]json.RawMessage, error) {
	if x == nil || x.forEach == nil {
		return nil, &ApplyError{Field: "for_each", Err: errors.New("the step does not fan out")}
	}
	list, err := x.forEach.Items(x.env.Activation(vars))
	if err != nil {
		return nil, &ApplyError{Field: "for_each", Err: err}
	}
	if len(list) > maxItems {
		return nil, &ApplyError{Field: "for_each", Err: fmt.Errorf("the list has %d items; the limit is %d", len(list), maxItems)}
	}
	out := make([]json.RawMessage, len(list))
	for i, v := range list {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, &ApplyError{Field: "for_each", Err: fmt.Errorf("item %d: %v", i, err)}
		}
		if bytes.Contains(b, []byte(`\u0000`)) {
			return nil, &ApplyError{Field: "for_each", Err: fmt.Errorf("item %d holds a NUL character", i)}
		}
		out[i] = b
	}
	return out, nil
}

// FansOut reports whether the step has a fan-out list (for_each).
func (x *StepExprs) FansOut() bool { return x != nil && x.forEach != nil }

// HasKeys reports whether the step has concurrency keys or a rate
// limit's key (decided at its release).
func (x *StepExprs) HasKeys() bool { return x != nil && (len(x.keys) > 0 || x.rateKey != nil) }

// RateKey evaluates the step's rate limit's key with vars ("" when it has
// none), and gives the limit. The error names it (rate_limit.key).
func (x *StepExprs) RateKey(vars expr.Vars) (string, *RateLimit, error) {
	if x == nil || x.rateKey == nil {
		return "", nil, nil
	}
	k, err := keyValue("rate_limit.key", x.rateKey.tmpl, x.rateKey.progs, x.env.Activation(vars))
	return k, x.rate, err
}

// Keys evaluates the step's concurrency keys with vars: their values, in
// the order of its concurrency list, and each one's limit (two of one
// value are one, with the smaller limit). The error names the key
// (concurrency[i].key).
func (x *StepExprs) Keys(vars expr.Vars) (values []string, limits []int, err error) {
	if !x.HasKeys() {
		return nil, nil, nil
	}
	tmpl, progs := make([]expr.Template, len(x.keys)), make([][]*expr.Program, len(x.keys))
	for i, k := range x.keys {
		tmpl[i], progs[i] = k.tmpl, k.progs
	}
	if values, err = keyValues(tmpl, progs, x.env.Activation(vars)); err != nil {
		return nil, nil, err
	}
	// Two keys of one value are one key, with the smaller limit.
	limits = slices.Clone(x.limits)
	for i := 0; i < len(values); i++ {
		if j := slices.Index(values[:i], values[i]); j >= 0 {
			limits[j] = min(limits[j], limits[i])
			values = slices.Delete(values, i, i+1)
			limits = slices.Delete(limits, i, i+1)
			i--
		}
	}
	return values, limits, nil
}

// HasCondition reports whether the step has a condition.
func (x *StepExprs) HasCondition() bool { return x != nil && x.when != nil }

// Condition evaluates the step's condition with vars (true when it has
// none).
func (x *StepExprs) Condition(vars expr.Vars) (bool, error) {
	if x == nil || x.when == nil {
		return true, nil
	}
	ok, err := x.when.Condition(x.env.Activation(vars))
	if err != nil {
		return false, &ApplyError{Field: "when", Err: err}
	}
	return ok, nil
}

// checkPlace checks what a field allows of a template: an HTTP URL starts
// with its scheme written out, and a secret reference is written out, not
// computed.
func checkPlace(path string, t expr.Template, secretOK bool) error {
	if path == "run.http.url" && (t[0].Expr || !strings.HasPrefix(t[0].Text, "http://") && !strings.HasPrefix(t[0].Text, "https://")) {
		return errors.New("a URL with expressions starts with http:// or https:// written out")
	}
	if secretOK && !t[0].Expr && strings.HasPrefix(t[0].Text, "secret://") {
		return errors.New("a secret reference is written out in full, not computed by an expression")
	}
	if strings.HasPrefix(path, "run.command.argv") {
		for _, p := range t {
			if _, err := ExpandArg(p.Text, nil); !p.Expr && err != nil {
				return err
			}
		}
	}
	return nil
}

// eachTemplate calls f with every field of st where an expression may
// appear: its path below the step, its text, and whether the field may
// hold a secret reference.
func eachTemplate(st *Step, f func(path, v string, secretOK bool)) {
	eachField(st, f)
	if len(st.Payload) > 0 && bytes.Contains(st.Payload, []byte(expr.Open)) {
		var v any
		if json.Unmarshal(st.Payload, &v) == nil {
			walkStrings(v, "payload", func(path, s string) { f(path, s, false) })
		}
	}
}

// Text renders one field of the step with vars (path names it, v is its
// text as written): its value as text, or v itself when it holds no
// expression (sleep.until, approval.message).
func (x *StepExprs) Text(path, v string, vars expr.Vars) (string, error) {
	if x == nil {
		return v, nil
	}
	return x.text(x.env.Activation(vars), path, v)
}

// text renders one field under the activation a.
func (x *StepExprs) text(a expr.Activation, path, v string) (string, error) {
	c, ok := x.templates[v]
	if !ok {
		return v, nil
	}
	out, err := expr.Render(c.tmpl, c.progs, a)
	if err != nil {
		return "", &ApplyError{Field: path, Err: err}
	}
	s, ok := out.(string)
	if !ok {
		var b strings.Builder
		if err := expr.Text(&b, out); err != nil {
			return "", &ApplyError{Field: path, Err: err}
		}
		s = b.String()
	}
	if !IsText(s) {
		return "", &ApplyError{Field: path, Err: errors.New("the value holds a NUL character")}
	}
	return s, nil
}

// eachField is eachTemplate without the payload.
func eachField(st *Step, f func(path, v string, secretOK bool)) {
	if sl := st.Sleep; sl != nil && sl.Until != "" {
		f("sleep.until", sl.Until, false)
	}
	if a := st.Approval; a != nil && a.Message != "" {
		f("approval.message", a.Message, false)
	}
	if h := st.Run.HTTP; h != nil {
		f("run.http.url", h.URL, false)
		for _, k := range sortedKeys(h.Headers) {
			f("run.http.headers."+k, h.Headers[k], true)
		}
	}
	if c := st.Run.Command; c != nil {
		for i, a := range c.Argv {
			if i > 0 {
				f(fmt.Sprintf("run.command.argv[%d]", i), a, false)
			}
		}
		for _, k := range sortedKeys(c.Env) {
			f("run.command.env."+k, c.Env[k], true)
		}
	}
	if j := st.Run.Job; j != nil && bytes.Contains(j.Params, []byte(expr.Open)) {
		var v any
		if json.Unmarshal(j.Params, &v) == nil {
			walkStrings(v, "run.job.params", func(path, s string) { f(path, s, false) })
		}
	}
}

// walkStrings calls f with every string value under v (not keys), in a
// stable order.
func walkStrings(v any, path string, f func(path, s string)) {
	switch x := v.(type) {
	case string:
		f(path, x)
	case []any:
		for i, item := range x {
			walkStrings(item, fmt.Sprintf("%s[%d]", path, i), f)
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			walkStrings(x[k], path+"."+k, f)
		}
	}
}

func stepNames(steps []Step) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.Name
	}
	return out
}

// ancestorsOf lists the steps that step i needs, directly or not.
func ancestorsOf(steps []Step, i int) map[string]bool {
	index := make(map[string]int, len(steps))
	for k, s := range steps {
		index[s.Name] = k
	}
	out := map[string]bool{}
	stack := append([]string(nil), steps[i].Needs...)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if out[n] {
			continue
		}
		out[n] = true
		if k, ok := index[n]; ok {
			stack = append(stack, steps[k].Needs...)
		}
	}
	return out
}

// An ApplyError is an expression of a step that could not be evaluated,
// or whose value its field cannot take.
type ApplyError struct {
	Field string // below the step: run.http.url, payload.files, ...
	Err   error
}

func (e *ApplyError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *ApplyError) Unwrap() error { return e.Err }

// Apply evaluates the step's expressions with vars: the executor and the
// payload the attempt runs with. In a command's arguments, the older
// {{ .Field }} references of the literal text are filled in too (the
// caller must not expand them again: an expression's value is never read
// as a template).
func (x *StepExprs) Apply(st Step, vars expr.Vars) (Executor, Payload, error) {
	a := x.env.Activation(vars)
	text := func(path, v string) (string, error) { return x.text(a, path, v) }
	run := st.Run
	if h := st.Run.HTTP; h != nil {
		hc := *h
		u, err := text("run.http.url", h.URL)
		if err != nil {
			return Executor{}, nil, err
		}
		if pu, perr := url.Parse(u); perr != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return Executor{}, nil, &ApplyError{Field: "run.http.url", Err: fmt.Errorf("%.200q is not an absolute http or https URL", u)}
		}
		hc.URL = u
		if len(h.Headers) > 0 {
			hc.Headers = make(map[string]string, len(h.Headers))
			for k, v := range h.Headers {
				s, err := text("run.http.headers."+k, v)
				if err != nil {
					return Executor{}, nil, err
				}
				if err := computedSecret(v, s); err != nil {
					return Executor{}, nil, &ApplyError{Field: "run.http.headers." + k, Err: err}
				}
				if !httpguts.ValidHeaderFieldValue(s) {
					return Executor{}, nil, &ApplyError{Field: "run.http.headers." + k, Err: fmt.Errorf("%.200q is not a valid header value", s)}
				}
				hc.Headers[k] = s
			}
		}
		run.HTTP = &hc
	}
	if c := st.Run.Command; c != nil {
		cc := *c
		cc.Argv = make([]string, len(c.Argv))
		cc.Argv[0] = c.Argv[0]
		fields := map[string]string{
			"ScheduledFor": vars.ScheduledFor.UTC().Format(time.RFC3339), "RunID": vars.RunID, "Step": st.Name,
			"Attempt": strconv.Itoa(vars.Attempt), "Job": vars.Job, "Namespace": vars.Namespace,
		}
		for i, arg := range c.Argv[1:] {
			path := fmt.Sprintf("run.command.argv[%d]", i+1)
			s, err := x.argument(arg, a, fields)
			if err != nil {
				return Executor{}, nil, &ApplyError{Field: path, Err: err}
			}
			cc.Argv[i+1] = s
		}
		if len(c.Env) > 0 {
			cc.Env = make(map[string]string, len(c.Env))
			for k, v := range c.Env {
				s, err := text("run.command.env."+k, v)
				if err != nil {
					return Executor{}, nil, err
				}
				if err := computedSecret(v, s); err != nil {
					return Executor{}, nil, &ApplyError{Field: "run.command.env." + k, Err: err}
				}
				cc.Env[k] = s
			}
		}
		run.Command = &cc
	}
	if j := st.Run.Job; j != nil {
		jc := *j
		params, err := x.render(j.Params, "run.job.params", a)
		if err != nil {
			return Executor{}, nil, err
		}
		jc.Params = params
		run.Job = &jc
	}
	payload, err := x.render(st.Payload, "payload", a)
	if err != nil {
		return Executor{}, nil, err
	}
	return run, payload, nil
}

// render evaluates the expressions in the strings of a JSON value (a
// payload, a job step's params) at path; one without any is returned as
// it is.
func (x *StepExprs) render(p Payload, path string, a expr.Activation) (Payload, error) {
	if len(p) == 0 || !bytes.Contains(p, []byte(expr.Open)) {
		return p, nil
	}
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, &ApplyError{Field: path, Err: err}
	}
	v, err := x.payload(v, path, a)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, &ApplyError{Field: path, Err: err}
	}
	if len(out) > MaxPayloadBytes {
		return nil, &ApplyError{Field: path, Err: fmt.Errorf("is %d bytes once evaluated; the limit is %d", len(out), MaxPayloadBytes)}
	}
	return out, nil
}

// argument renders one command argument: its expressions, and the older
// {{ .Field }} references of its literal text.
func (x *StepExprs) argument(arg string, a expr.Activation, fields map[string]string) (string, error) {
	c, ok := x.templates[arg]
	if !ok {
		return ExpandArg(arg, fields)
	}
	var b strings.Builder
	k := 0
	for _, p := range c.tmpl {
		if !p.Expr {
			s, err := ExpandArg(p.Text, fields)
			if err != nil {
				return "", err
			}
			b.WriteString(s)
			continue
		}
		v, err := c.progs[k].Eval(a)
		k++
		if err != nil {
			return "", err
		}
		if err := expr.Text(&b, v); err != nil {
			return "", err
		}
		if b.Len() > expr.MaxResult {
			return "", fmt.Errorf("is more than %d bytes once evaluated", expr.MaxResult)
		}
	}
	if !IsText(b.String()) {
		return "", errors.New("the value holds a NUL character")
	}
	return b.String(), nil
}

// payload evaluates the strings of a decoded payload that hold
// expressions; a string that is one whole expression takes its value.
func (x *StepExprs) payload(v any, path string, a expr.Activation) (any, error) {
	switch t := v.(type) {
	case string:
		c, ok := x.templates[t]
		if !ok {
			return t, nil
		}
		out, err := expr.Render(c.tmpl, c.progs, a)
		if err != nil {
			return nil, &ApplyError{Field: path, Err: err}
		}
		return out, nil
	case []any:
		for i := range t {
			item, err := x.payload(t[i], fmt.Sprintf("%s[%d]", path, i), a)
			if err != nil {
				return nil, err
			}
			t[i] = item
		}
	case map[string]any:
		for k := range t {
			item, err := x.payload(t[k], path+"."+k, a)
			if err != nil {
				return nil, err
			}
			t[k] = item
		}
	}
	return v, nil
}

// computedSecret refuses a value that an expression made a secret
// reference: secrets are named by the job's author, never by a param or
// a step's output.
func computedSecret(template, value string) error {
	if template != value && strings.HasPrefix(value, "secret://") {
		return errors.New("an expression's value may not be a secret reference (secret://...)")
	}
	return nil
}
