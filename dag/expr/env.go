package expr

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
)

// Type is a param's declared type.
type Type string

// Param types.
const (
	String  Type = "string"
	Number  Type = "number"
	Integer Type = "integer"
	Boolean Type = "boolean"
	Object  Type = "object"
	Array   Type = "array"
)

// Types lists the param types in the order documentation gives them.
var Types = []Type{String, Number, Integer, Boolean, Object, Array}

func (t Type) cel() *cel.Type {
	switch t {
	case String:
		return cel.StringType
	case Number:
		return cel.DoubleType
	case Integer:
		return cel.IntType
	case Boolean:
		return cel.BoolType
	case Object:
		return cel.MapType(cel.StringType, cel.DynType)
	case Array:
		return cel.ListType(cel.DynType)
	}
	return cel.DynType
}

// Bounds.
const (
	// MaxSource bounds one expression's source, in bytes.
	MaxSource = 4096
	// CostLimit bounds one evaluation, in CEL's cost units (about one a
	// value visited or compared, and a tenth of a byte for strings).
	CostLimit = 1_000_000
	// MaxResult bounds one result, rendered as JSON, in bytes.
	MaxResult = 64 << 10
)

// Variables besides params and steps.
var runVars = []struct {
	name string
	t    *cel.Type
}{
	{"run.id", cel.StringType},
	{"run.scheduled_for", cel.TimestampType},
	{"run.trigger", cel.StringType},
	{"run.upstream", cel.DynType},
	{"run.event", cel.DynType}, // the event that started the run (schedule.event): id, type, source, time, data
	{"event", cel.DynType},     // the same, as a filter reads it
	{"job.name", cel.StringType},
	{"job.namespace", cel.StringType},
	{"attempt", cel.IntType},
	{"item", cel.DynType},       // an item of a fan-out (for_each): its element of the list
	{"item_index", cel.IntType}, // and its index, from 0
}

// An Env is what the expressions of one job may read: its params, with
// their types, and its steps. Build it once per job version; Check and
// Compile are safe for concurrent use.
type Env struct {
	cel    *cel.Env
	key    string // paramsKey(params)
	params map[string]Type
	steps  map[string]bool
	groups map[string]bool // the steps that fan out (for_each)
}

// NewEnv makes the Env of a job with these params and steps, of which
// groups fan out (read as steps.NAME.outputs, not .output).
func NewEnv(params map[string]Type, steps, groups []string) (*Env, error) {
	key := paramsKey(params)
	env, err := cachedEnv(key, func() (*cel.Env, error) { return newCELEnv(params) })
	if err != nil {
		return nil, err
	}
	e := &Env{cel: env, key: key, params: params, steps: map[string]bool{}, groups: map[string]bool{}}
	for _, s := range steps {
		e.steps[s] = true
	}
	for _, s := range groups {
		e.groups[s] = true
	}
	return e, nil
}

func newCELEnv(params map[string]Type) (*cel.Env, error) {
	opts := []cel.EnvOption{
		cel.Variable("steps", cel.MapType(cel.StringType, cel.MapType(cel.StringType, cel.DynType))),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxSource),
		ext.Strings(),
	}
	for _, v := range runVars {
		opts = append(opts, cel.Variable(v.name, v.t))
	}
	for name, t := range params {
		opts = append(opts, cel.Variable("params."+name, t.cel()))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, err
	}
	resized, err := sizedOverloads(env)
	if err != nil {
		return nil, err
	}
	return env.Extend(resized...)
}

// A Program is one checked expression, ready to evaluate.
type Program struct {
	Source string
	prg    cel.Program
	want   int
	// Reads says what the expression reads, so a caller loads only that.
	Reads Reads
}

// Reads is what an expression (or a step's expressions) read.
type Reads struct {
	Params bool
	// Item: item or item_index, which only the items of a fan-out have.
	Item  bool
	Steps []string // step names, sorted, without duplicates
	// Outputs are the steps (of Steps) whose output is read, not only
	// their status.
	Outputs []string
}

// Add merges o into r.
func (r *Reads) Add(o Reads) {
	r.Params = r.Params || o.Params
	r.Item = r.Item || o.Item
	r.Steps = union(r.Steps, o.Steps)
	r.Outputs = union(r.Outputs, o.Outputs)
}

func union(a, b []string) []string {
	for _, s := range b {
		if i, found := slices.BinarySearch(a, s); !found {
			a = slices.Insert(a, i, s)
		}
	}
	return a
}

// Compile checks one expression that a step may evaluate, reading only
// the steps in ancestors: its syntax, the params and steps it names, and
// its types. The error is an *Error whose Offset is within src.
func (e *Env) Compile(src string, ancestors map[string]bool) (*Program, error) {
	return e.compile(src, ancestors, wantAny)
}

// CompileCondition is Compile for a condition: its type is bool (or dyn,
// whose value must then be a bool).
func (e *Env) CompileCondition(src string, ancestors map[string]bool) (*Program, error) {
	return e.compile(src, ancestors, wantBool)
}

// CompileList is Compile for a fan-out's list (for_each): its type is a
// list (or dyn, whose value must then be a list).
func (e *Env) CompileList(src string, ancestors map[string]bool) (*Program, error) {
	return e.compile(src, ancestors, wantList)
}

// The type a compiled expression must have.
const (
	wantAny = iota
	wantBool
	wantList
)

func (e *Env) compile(src string, ancestors map[string]bool, want int) (*Program, error) {
	if len(src) > MaxSource {
		return nil, &Error{Source: src, Message: fmt.Sprintf("is %d bytes; the limit is %d", len(src), MaxSource)}
	}
	key := compiledKey{e.key, src, want}
	if c, ok := cachedProgram(key); ok {
		reads, err := e.reads(src, c.parsed.NativeRep(), ancestors)
		if err != nil {
			return nil, err
		}
		return &Program{Source: src, prg: c.prg, want: want, Reads: reads}, nil
	}
	parsed, iss := e.cel.Parse(src)
	if iss.Err() != nil {
		return nil, issueError(src, iss)
	}
	reads, err := e.reads(src, parsed.NativeRep(), ancestors)
	if err != nil {
		return nil, err
	}
	checked, iss := e.cel.Check(parsed)
	if iss.Err() != nil {
		return nil, issueError(src, iss)
	}
	switch t := checked.OutputType(); {
	case t.IsExactType(cel.DynType):
	case want == wantBool && !t.IsExactType(cel.BoolType):
		return nil, &Error{Source: src, Message: fmt.Sprintf("a condition is a bool; this is a %s", t)}
	case want == wantList && t.Kind() != types.ListKind:
		return nil, &Error{Source: src, Message: fmt.Sprintf("for_each is a list; this is a %s", t)}
	}
	prg, err := e.cel.Program(checked, cel.CostLimit(CostLimit), cel.EvalOptions(cel.OptOptimize), sizedOperators(), sizedRegexConstants(), cel.CostTracking(buildCost{}))
	if err != nil {
		return nil, &Error{Source: src, Message: err.Error()}
	}
	// Check rewrites the parsed tree it is given (params.x becomes one
	// identifier): what reads walks is a tree parsed afresh.
	if fresh, iss := e.cel.Parse(src); iss.Err() == nil {
		storeProgram(key, compiledExpr{fresh, prg})
	}
	return &Program{Source: src, prg: prg, want: want, Reads: reads}, nil
}

// reads walks an expression for the params and steps it names, and
// refuses the ones the step may not read, with a message that says what
// it may.
func (e *Env) reads(src string, a *celast.AST, ancestors map[string]bool) (Reads, error) {
	var r Reads
	var first *Error
	info := a.SourceInfo()
	fail := func(id int64, format string, args ...any) {
		if first == nil {
			first = &Error{Source: src, Offset: offsetOf(src, info.GetStartLocation(id)), Message: fmt.Sprintf(format, args...)}
		}
	}
	for _, x := range celast.MatchDescendants(celast.NavigateAST(a), celast.AllMatcher()) {
		switch x.Kind() {
		case celast.IdentKind:
			switch root(x.AsIdent()) {
			case "item", "item_index":
				r.Item = true
			case "params":
				if !selected(x) {
					fail(x.ID(), "params is read one at a time: params.NAME")
				}
			case "steps":
				if !selected(x) {
					fail(x.ID(), "steps is read one at a time: steps.NAME.output (or steps['NAME'])")
				}
			}
		case celast.SelectKind:
			sel := x.AsSelect()
			op := sel.Operand()
			if op.Kind() != celast.IdentKind {
				continue
			}
			switch root(op.AsIdent()) {
			case "params":
				name := sel.FieldName()
				if _, ok := e.params[name]; !ok {
					fail(op.ID(), "no param %q (%s)", name, e.declared())
				}
				r.Params = true
			case "steps":
				e.step(&r, sel.FieldName(), fieldOf(x), ancestors, func(format string, args ...any) { fail(op.ID(), format, args...) })
			}
		case celast.CallKind:
			call := x.AsCall()
			if refused[call.FunctionName()] != "" {
				fail(x.ID(), "%s", refused[call.FunctionName()])
				continue
			}
			if args := call.Args(); call.FunctionName() == overloads.Matches && len(args) > 0 {
				if pat, ok := constString(args[len(args)-1]); ok {
					if msg := sizePattern(pat); msg != "" {
						fail(x.ID(), "%s", msg)
					}
				}
			}
			if call.FunctionName() != "_[_]" || len(call.Args()) != 2 {
				continue
			}
			op, key := call.Args()[0], call.Args()[1]
			if op.Kind() != celast.IdentKind || root(op.AsIdent()) != "steps" {
				continue
			}
			name, ok := constString(key)
			if !ok {
				fail(op.ID(), "steps is indexed by a step's name written out: steps['NAME']")
				continue
			}
			e.step(&r, name, fieldOf(x), ancestors, func(format string, args ...any) { fail(op.ID(), format, args...) })
		}
	}
	if first != nil {
		return Reads{}, first
	}
	return r, nil
}

// root is an identifier as the checker resolves it: a leading dot names
// the same variable (.steps is steps).
func root(ident string) string { return strings.TrimPrefix(ident, ".") }

// refused are functions an expression may not call, and why: what CEL's
// cost model does not bound.
var refused = map[string]string{
	"format": "format is not available: its cost is not bounded; join strings with + or join()",
}

// selected reports whether the identifier x is the operand of a selection
// or index (params.x, steps.x, steps['x']).
func selected(x celast.NavigableExpr) bool {
	parent, ok := x.Parent()
	if !ok {
		return false
	}
	switch parent.Kind() {
	case celast.SelectKind:
		return true
	case celast.CallKind:
		c := parent.AsCall()
		return c.FunctionName() == "_[_]" && len(c.Args()) == 2 && c.Args()[0].ID() == x.ID()
	}
	return false
}

// step records a read of step name's field (fieldOf; "" when it is not
// written out).
func (e *Env) step(r *Reads, name, field string, ancestors map[string]bool, fail func(string, ...any)) {
	switch {
	case !e.steps[name]:
		fail("no step %q in this job", name)
	case !ancestors[name]:
		fail("step %q is not an ancestor of this step: it may not have run (add it to needs, here or above)", name)
	case e.groups[name] && field == "output":
		fail("step %q fans out (for_each): read steps.%s.outputs, the list of its items' outputs", name, name)
	case !e.groups[name] && field == "outputs":
		fail("step %q does not fan out: read steps.%s.output", name, name)
	case field != "status":
		r.Add(Reads{Steps: []string{name}, Outputs: []string{name}})
	default:
		r.Add(Reads{Steps: []string{name}})
	}
}

// fieldOf is the field a step read (steps.NAME, steps['NAME']) selects,
// written out (.status, ['output']); "" when it is computed or absent:
// such a read may read the step's output.
func fieldOf(x celast.NavigableExpr) string {
	parent, ok := x.Parent()
	if !ok {
		return ""
	}
	switch parent.Kind() {
	case celast.SelectKind:
		return parent.AsSelect().FieldName()
	case celast.CallKind:
		c := parent.AsCall()
		if c.FunctionName() == "_[_]" && len(c.Args()) == 2 && c.Args()[0].ID() == x.ID() {
			name, _ := constString(c.Args()[1])
			return name
		}
	}
	return ""
}

func (e *Env) declared() string {
	if len(e.params) == 0 {
		return "the job declares no params"
	}
	names := make([]string, 0, len(e.params))
	for n := range e.params {
		names = append(names, n)
	}
	sort.Strings(names)
	return "declared: " + strings.Join(names, ", ")
}

func constString(x celast.Expr) (string, bool) {
	if x.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := x.AsLiteral().(types.String)
	return string(s), ok
}

// issueError turns CEL's first issue into an *Error at its place in src.
func issueError(src string, iss *cel.Issues) *Error {
	errs := iss.Errors()
	if len(errs) == 0 {
		return &Error{Source: src, Message: iss.String()}
	}
	return &Error{Source: src, Offset: offsetOf(src, errs[0].Location), Message: errs[0].Message}
}

// offsetOf turns a CEL location (line from 1, column from 0, in code
// points) into a byte offset in src.
func offsetOf(src string, loc common.Location) int {
	line, col := loc.Line(), loc.Column()
	off := 0
	for l := 1; l < line; l++ {
		i := strings.IndexByte(src[off:], '\n')
		if i < 0 {
			return off
		}
		off += i + 1
	}
	for ; col > 0 && off < len(src); col-- {
		_, n := decodeRune(src[off:])
		off += n
	}
	return off
}

func abbreviate(s string) string {
	if len(s) <= 60 {
		return s
	}
	for i := 57; i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i] + "..."
		}
	}
	return s[:57] + "..."
}

// CompileTemplate checks every expression of t (Compile), returning their
// programs in order and what they read together. An error's Offset is
// within the field's string.
func (e *Env) CompileTemplate(t Template, ancestors map[string]bool) ([]*Program, Reads, error) {
	var progs []*Program
	var reads Reads
	for _, p := range t {
		if !p.Expr {
			continue
		}
		prg, err := e.Compile(p.Source, ancestors)
		if err != nil {
			var xe *Error
			if errors.As(err, &xe) {
				xe.Offset += p.Offset
			}
			return nil, Reads{}, err
		}
		progs = append(progs, prg)
		reads.Add(prg.Reads)
	}
	return progs, reads, nil
}
