package dag

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/orrery-dev/orrery/dag/expr"
)

// Param declares one of a job's params: a run's input, read by
// expressions as params.NAME. A param without a default must be given by
// every manual trigger; scheduled runs take the defaults.
type Param struct {
	Type        expr.Type `json:"type" yaml:"type" jsonschema:"enum=string,enum=number,enum=integer,enum=boolean,enum=object,enum=array"`
	Default     Payload   `json:"default,omitempty" yaml:"default,omitempty"`
	Enum        []Payload `json:"enum,omitempty" yaml:"enum,omitempty"`
	Description string    `json:"description,omitempty" yaml:"description,omitempty"`
}

// Bounds of params.
const (
	MaxParams      = 100
	MaxParamEnum   = 100
	MaxParamsBytes = 64 << 10 // a run's values, as JSON
	// MaxParamEnumBytes and MaxParamEnumValues bound one param's enum
	// together, as JSON text and in JSON values: each value is one a run
	// may be given, and every reader of the job (the default list view
	// included) carries them all.
	MaxParamEnumBytes  = 16 << 10
	MaxParamEnumValues = 1_000
)

var paramNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// celReserved are the words CEL keeps for itself: params.in would not
// parse.
var celReserved = map[string]bool{"as": true, "break": true, "const": true, "continue": true, "else": true, "false": true,
	"for": true, "function": true, "if": true, "import": true, "in": true, "let": true, "loop": true, "package": true,
	"namespace": true, "null": true, "return": true, "true": true, "var": true, "void": true, "while": true}

func validateParams(es *Errors, params map[string]Param) {
	if len(params) > MaxParams {
		es.add("spec.params", "has %d params; the limit is %d", len(params), MaxParams)
		return
	}
	size := 2
	for name, p := range params {
		size += len(name) + len(p.Default) + 4
	}
	if size > MaxParamsBytes {
		es.add("spec.params", "the defaults are %d bytes as JSON; a run's params are at most %d", size, MaxParamsBytes)
	}
	for _, name := range sortedKeys(params) {
		p := params[name]
		path := "spec.params." + name
		if len(name) > MaxNameLen || !paramNameRE.MatchString(name) {
			es.add(path, "param name %q must be 1-%d characters of a-z, 0-9 and '_', starting with a letter (expressions read it as params.NAME)", name, MaxNameLen)
			continue
		}
		if celReserved[name] {
			es.add(path, "param name %q is a word of the expression language; choose another", name)
			continue
		}
		known := false
		for _, t := range expr.Types {
			known = known || p.Type == t
		}
		if !known {
			es.add(path+".type", "%q is not one of string, number, integer, boolean, object, array", p.Type)
			continue
		}
		if len(p.Description) > MaxDescriptionLen {
			es.add(path+".description", "is %d characters; the limit is %d", len(p.Description), MaxDescriptionLen)
		}
		if len(p.Enum) > MaxParamEnum {
			es.add(path+".enum", "has %d values; the limit is %d", len(p.Enum), MaxParamEnum)
			continue
		}
		enumBytes, enumValues := 1, 0 // [ and the values, each with , or ]
		for _, v := range p.Enum {
			enumBytes, enumValues = enumBytes+len(v)+1, enumValues+v.Values()
		}
		if enumBytes > MaxParamEnumBytes {
			es.add(path+".enum", "is %d bytes as JSON; the limit is %d", enumBytes, MaxParamEnumBytes)
			continue
		}
		if enumValues > MaxParamEnumValues {
			es.add(path+".enum", "holds %d JSON values; the limit is %d", enumValues, MaxParamEnumValues)
			continue
		}
		for i, v := range p.Enum {
			if err := p.checkType(v); err != nil {
				es.add(fmt.Sprintf("%s.enum[%d]", path, i), "%v", err)
			}
		}
		if len(p.Default) > 0 {
			if err := p.Check(p.Default); err != nil {
				es.add(path+".default", "%v", err)
			}
		}
	}
}

// Check says whether v (JSON) is a value of p: of its type, and one of
// its enum when it has one.
func (p Param) Check(v Payload) error {
	if err := p.checkType(v); err != nil {
		return err
	}
	if len(p.Enum) == 0 {
		return nil
	}
	c := canonicalJSON(v)
	for _, e := range p.Enum {
		if bytes.Equal(canonicalJSON(e), c) {
			return nil
		}
	}
	enum := make([]string, len(p.Enum))
	for i, e := range p.Enum {
		enum[i] = string(e)
	}
	return fmt.Errorf("%s is not one of %s", v, strings.Join(enum, ", "))
}

// normal is a value of p (Check's) as a run keeps it: an integer param's
// 3.0 or 3e0 is 3, so that expressions read an int.
func (p Param) normal(v Payload) Payload {
	if p.Type != expr.Integer {
		return v
	}
	if val, err := expr.FromJSON(v); err == nil {
		if f, isFloat := val.(float64); isFloat {
			return Payload(strconv.FormatInt(int64(f), 10))
		}
	}
	return v
}

func (p Param) checkType(v Payload) error {
	val, err := expr.FromJSON(v)
	if err != nil {
		return fmt.Errorf("%.60s is not JSON: %v", v, err)
	}
	ok := false
	switch p.Type {
	case expr.String:
		_, ok = val.(string)
	case expr.Number:
		switch val.(type) {
		case int64, float64:
			ok = true
		}
	case expr.Integer:
		switch n := val.(type) {
		case int64:
			ok = true
		case float64:
			ok = n == math.Trunc(n) && math.Abs(n) < 1<<53
		}
	case expr.Boolean:
		_, ok = val.(bool)
	case expr.Object:
		_, ok = val.(map[string]any)
	case expr.Array:
		_, ok = val.([]any)
	}
	if !ok {
		return fmt.Errorf("%.60s is not a%s %s", v, article(string(p.Type)), p.Type)
	}
	return nil
}

func article(word string) string {
	if strings.ContainsRune("aeiou", rune(word[0])) {
		return "n"
	}
	return ""
}

// ParamText reads a value of p written as text (a command line's
// key=value): a string param takes the text as it is, the others read it
// as JSON (3, true, [1,2], {"a":1}).
func (p Param) ParamText(text string) (Payload, error) {
	if p.Type == expr.String {
		b, _ := json.Marshal(text)
		return b, nil
	}
	if !json.Valid([]byte(text)) {
		return nil, fmt.Errorf("%q is not a%s %s", text, article(string(p.Type)), p.Type)
	}
	return canonicalJSON([]byte(text)), nil
}

// RunParams types a trigger's given values against the declaration and
// fills in the defaults: the run's params, as a JSON object (nil when the
// job declares none). An unknown param, a value not of its param, or a
// param without a default that was not given is a *FieldError naming
// it (params.NAME), the first in name order.
func (s *JobSpec) RunParams(given map[string]Payload) (Payload, error) {
	for _, name := range sortedKeys(given) {
		p, ok := s.Params[name]
		if !ok {
			msg := "the job declares no params"
			if len(s.Params) > 0 {
				msg = "declared: " + strings.Join(sortedKeys(s.Params), ", ")
			}
			return nil, &FieldError{Field: "params." + name, Message: "no such param (" + msg + ")"}
		}
		if err := p.Check(given[name]); err != nil {
			return nil, &FieldError{Field: "params." + name, Message: err.Error()}
		}
	}
	if len(s.Params) == 0 {
		return nil, nil
	}
	values := make(map[string]json.RawMessage, len(s.Params))
	for _, name := range sortedKeys(s.Params) {
		switch v, ok := given[name]; {
		case ok:
			values[name] = json.RawMessage(s.Params[name].normal(v))
		case len(s.Params[name].Default) > 0:
			values[name] = json.RawMessage(s.Params[name].Default)
		default:
			return nil, &FieldError{Field: "params." + name, Message: "is required: it has no default"}
		}
	}
	out, err := json.Marshal(values)
	if err != nil {
		return nil, err
	}
	if len(out) > MaxParamsBytes {
		return nil, &FieldError{Field: "params", Message: fmt.Sprintf("the values are %d bytes as JSON; the limit is %d", len(out), MaxParamsBytes)}
	}
	return canonicalJSON(out), nil
}

// RequiredParam names a param without a default, the first in name order
// ("" when every param has one): a scheduled run of the job, which gives
// no values, is skipped and says so.
func (s *JobSpec) RequiredParam() string {
	if len(s.Params) == 0 {
		return ""
	}
	for _, name := range sortedKeys(s.Params) {
		if len(s.Params[name].Default) == 0 {
			return name
		}
	}
	return ""
}

// ParamTypes are the declared types of the params, for an expr.Env.
func (s *JobSpec) ParamTypes() map[string]expr.Type {
	out := make(map[string]expr.Type, len(s.Params))
	for name, p := range s.Params {
		out[name] = p.Type
	}
	return out
}
