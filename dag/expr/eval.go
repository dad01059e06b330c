package expr

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// Vars are the values an evaluation reads.
type Vars struct {
	// Params are the run's params as JSON values (FromJSON's).
	Params map[string]any
	// Steps are the ancestors the expressions read, by name.
	Steps        map[string]StepVars
	RunID        string
	ScheduledFor time.Time
	Trigger      string
	Job          string
	Namespace    string
	Attempt      int
	// Upstream is run.upstream: for a run another job's run started
	// (schedule.after), that run's id, job, namespace, outcome and
	// outputs; empty otherwise.
	Upstream map[string]any
	// Event is run.event (and event): for a run an event started
	// (schedule.event), the event's id, type, source, time and data;
	// empty otherwise.
	Event map[string]any
	// Incoming, when set, is what event reads instead (run.event stays
	// the run's): the event a waiting step's match is asked about.
	Incoming map[string]any
	// Spent, when set, is a cost budget shared with other activations (a
	// transaction's conditions): they all stop at one CostLimit.
	Spent *uint64
	// Item and ItemIndex are an item's of a fan-out (for_each): its
	// element of the list (a JSON value) and its index.
	Item      any
	ItemIndex int
}

// StepVars are what an expression reads of a step.
type StepVars struct {
	Output any // a JSON value (Output's), or the text
	// Outputs, for a step that fans out (Group), are its items' outputs
	// in item order (null for an item that did not succeed).
	Outputs []any
	Group   bool
	Status  string
	// Truncated: the output was cut (at MaxOutput bytes); an expression
	// that reads it fails rather than read part of it.
	Truncated bool
}

// An Activation is Vars made ready for evaluation, for one Env: build it
// once for all the expressions of one attempt.
type Activation struct {
	vars      map[string]any
	spent     *uint64           // the cost of the evaluations so far
	truncated map[string]string // steps whose output was cut, and how
}

// Activation makes v ready for e's programs. A param is converted to its
// declared type (a number param given 3 is 3.0); one missing is left out,
// and an expression reading it fails.
func (e *Env) Activation(v Vars) Activation {
	m := make(map[string]any, len(runVars)+len(v.Params)+1)
	m["run.id"] = v.RunID
	m["run.scheduled_for"] = v.ScheduledFor
	m["run.trigger"] = v.Trigger
	upstream := v.Upstream
	if upstream == nil {
		upstream = map[string]any{}
	}
	m["run.upstream"] = upstream
	event := v.Event
	if event == nil {
		event = map[string]any{}
	}
	m["run.event"] = event
	m["event"] = event
	if v.Incoming != nil { // a wait's match: event is the one arriving
		m["event"] = v.Incoming
	}
	m["job.name"] = v.Job
	m["job.namespace"] = v.Namespace
	m["attempt"] = int64(v.Attempt)
	m["item"] = v.Item
	m["item_index"] = int64(v.ItemIndex)
	for name, t := range e.params {
		val, ok := v.Params[name]
		if !ok {
			continue
		}
		if t == Number {
			if i, isInt := val.(int64); isInt {
				val = float64(i)
			}
		}
		m["params."+name] = val
	}
	steps := make(map[string]any, len(v.Steps))
	var truncated map[string]string
	for name, s := range v.Steps {
		if s.Group {
			outputs := s.Outputs
			if outputs == nil {
				outputs = []any{}
			}
			steps[name] = map[string]any{"outputs": outputs, "status": s.Status}
		} else {
			steps[name] = map[string]any{"output": s.Output, "status": s.Status}
		}
		if s.Truncated {
			if truncated == nil {
				truncated = map[string]string{}
			}
			truncated[name] = fmt.Sprintf("the output of step %s was cut (it passed %d bytes)", name, MaxOutputRead)
			if s.Group {
				truncated[name] = fmt.Sprintf("the outputs of step %s were cut (an item's passed %d bytes, or all together %d)", name, MaxOutputRead, MaxOutputsRead)
			}
		}
	}
	m["steps"] = steps
	spent := v.Spent
	if spent == nil {
		spent = new(uint64)
	}
	return Activation{vars: m, spent: spent, truncated: truncated}
}

// Eval evaluates p. The result is a JSON value: nil, bool, int64, float64,
// string (a timestamp in RFC 3339, bytes in base64), []any or
// map[string]any, at most MaxResult bytes as JSON.
// All evaluations with one Activation share one CostLimit: the
// expressions of one attempt together stop at the limit, or one of them
// just past it.
func (p *Program) Eval(a Activation) (any, error) {
	for _, step := range p.Reads.Outputs {
		if why, cut := a.truncated[step]; cut {
			return nil, &Error{Source: p.Source, Message: why + ": an expression does not read part of an output"}
		}
	}
	if *a.spent >= CostLimit {
		return nil, &Error{Source: p.Source, Message: fmt.Sprintf("not evaluated: the expressions evaluated with it together reached the cost limit (%d)", CostLimit)}
	}
	out, det, err := p.prg.Eval(a.vars)
	if det != nil && det.ActualCost() != nil {
		*a.spent += *det.ActualCost()
	}
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "cost limit exceeded") {
			msg = fmt.Sprintf("stopped at the cost limit (%d): the expression does too much work", CostLimit)
		}
		return nil, &Error{Source: p.Source, Message: msg}
	}
	budget := MaxResult
	if p.want == wantList {
		budget = MaxItemsJSON
	}
	v, err := toJSON(out, &budget, 0)
	if err != nil {
		return nil, &Error{Source: p.Source, Message: err.Error()}
	}
	return v, nil
}

// MaxItemsJSON bounds a fan-out's list (CompileList's), as JSON.
const MaxItemsJSON = 1 << 20

// MaxOutputsRead bounds the outputs of a fan-out's items read together
// (steps.NAME.outputs).
const MaxOutputsRead = 1 << 20

// Items evaluates a fan-out's list (CompileList's): a list of JSON
// values, at most MaxItemsJSON bytes as JSON.
func (p *Program) Items(a Activation) ([]any, error) {
	v, err := p.Eval(a)
	if err != nil {
		return nil, err
	}
	list, ok := v.([]any)
	if !ok {
		return nil, &Error{Source: p.Source, Message: fmt.Sprintf("for_each is a list; this was %.200s", mustText(v))}
	}
	return list, nil
}

// MaxOutputRead is the size past which a step's output is cut, as the
// executor keeps it (engine/executor.MaxOutput).
const MaxOutputRead = 64 << 10

var errTooLarge = fmt.Errorf("the result is larger than %d bytes as JSON", MaxResult)

// maxDepth bounds the nesting of a result (JSON decoders have limits too).
const maxDepth = 100

// toJSON converts a CEL value to a JSON value, spending budget (an
// estimate of its JSON size) as it goes, so a huge result stops early.
func toJSON(v ref.Val, budget *int, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("the result nests deeper than %d", maxDepth)
	}
	spend := func(n int) error {
		*budget -= n
		if *budget < 0 {
			return errTooLarge
		}
		return nil
	}
	switch x := v.(type) {
	case types.Null:
		return nil, spend(4)
	case types.Bool:
		return bool(x), spend(5)
	case types.Int:
		return int64(x), spend(20)
	case types.Uint:
		if uint64(x) > math.MaxInt64 {
			return float64(x), spend(24)
		}
		return int64(x), spend(20)
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("the result %v has no JSON form", f)
		}
		return f, spend(24)
	case types.String:
		return string(x), spend(len(x) + 2)
	case types.Bytes:
		s := base64.StdEncoding.EncodeToString(x)
		return s, spend(len(s) + 2)
	case types.Timestamp:
		return x.Time.UTC().Format(time.RFC3339Nano), spend(32)
	case types.Duration:
		return x.Duration.String(), spend(24)
	case traits.Lister:
		n, ok := x.Size().(types.Int)
		if !ok {
			return nil, errors.New("a list without a size")
		}
		if err := spend(2 + int(n)); err != nil {
			return nil, err
		}
		out := make([]any, 0, int(n))
		for i := types.Int(0); i < n; i++ {
			item, err := toJSON(x.Get(i), budget, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, item)
		}
		return out, nil
	case traits.Mapper:
		if err := spend(2); err != nil {
			return nil, err
		}
		out := map[string]any{}
		it := x.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("a map key %v is not a string: JSON has only string keys", k)
			}
			if err := spend(len(ks) + 4); err != nil {
				return nil, err
			}
			item, err := toJSON(x.Get(k), budget, depth+1)
			if err != nil {
				return nil, err
			}
			out[string(ks)] = item
		}
		return out, nil
	}
	return nil, fmt.Errorf("a result of type %s has no JSON form", v.Type().TypeName())
}

// Condition evaluates a condition (CompileCondition's).
func (p *Program) Condition(a Activation) (bool, error) {
	v, err := p.Eval(a)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, &Error{Source: p.Source, Message: fmt.Sprintf("a condition is a bool; this was %s", mustText(v))}
	}
	return b, nil
}

func mustText(v any) string {
	var b strings.Builder
	if err := Text(&b, v); err != nil || v == nil {
		return "null"
	}
	if _, isText := v.(string); isText {
		return strconv.Quote(b.String())
	}
	return b.String()
}

// Render evaluates t with the programs of its expressions (in order, as
// Env.CompileTemplate returned them). A whole template keeps its
// expression's value; otherwise each value is rendered as text (Text) in
// place. The result is at most MaxResult bytes.
func Render(t Template, progs []*Program, a Activation) (any, error) {
	if t.Whole() {
		return progs[0].Eval(a)
	}
	var b strings.Builder
	k := 0
	for _, p := range t {
		if !p.Expr {
			b.WriteString(p.Text)
			continue
		}
		v, err := progs[k].Eval(a)
		k++
		if err != nil {
			return nil, err
		}
		if err := Text(&b, v); err != nil {
			return nil, &Error{Source: p.Source, Message: err.Error()}
		}
		if b.Len() > MaxResult {
			return nil, &Error{Source: p.Source, Message: errTooLarge.Error()}
		}
	}
	return b.String(), nil
}

// Text writes a JSON value as text: a string as it is, null as nothing,
// anything else in its compact JSON form.
func Text(b *strings.Builder, v any) error {
	switch x := v.(type) {
	case nil:
	case string:
		b.WriteString(x)
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case bool:
		b.WriteString(strconv.FormatBool(x))
	default:
		out, err := json.Marshal(x)
		if err != nil {
			return err
		}
		b.Write(out)
	}
	return nil
}

// FromJSON decodes JSON text as the JSON values expressions read: numbers
// without a fraction or exponent that fit in 64 bits as int64, others as
// float64.
func FromJSON(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("more than one JSON value")
	}
	return numbers(v), nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = numbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = numbers(x[k])
		}
	}
	return v
}

// Output is what an expression reads of a step's output: the JSON value
// when the whole text is JSON, else the value of its last line when that
// line is JSON (a program that prints a JSON summary after other lines),
// else the text.
func Output(text string) any {
	s := strings.TrimSpace(text)
	if s == "" {
		return ""
	}
	if v, err := FromJSON([]byte(s)); err == nil {
		return v
	}
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		if v, err := FromJSON([]byte(s[i+1:])); err == nil {
			if _, isObj := v.(map[string]any); isObj {
				return v
			}
			if _, isList := v.([]any); isList {
				return v
			}
		}
	}
	return text
}

func decodeRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }
