package expr

import (
	"strconv"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/parser"
)

// Keyed matches: a waiting step's match of the form `event.PATH == EXPR`
// (or `EXPR == event.PATH`) whose EXPR does not read event is indexed.
// EXPR is evaluated once, when the step parks, into a key (PATH and the
// value's canonical form); an event arriving offers the keys of its
// scalar leaves, and only the waits whose key is among them (or that have
// none) are asked their match. The match itself is still evaluated: the
// key only leaves out waits it could not hold for.

// MatchKey is the indexed half of a match.
type MatchKey struct {
	// Path is the event's field the match compares (["data", "order"]).
	Path []string
	// Value is EXPR, the side that does not read event.
	Value *Program
}

// keySep joins a key's path and value: a byte no field name or
// canonical value holds unescaped.
const keySep = "\x1f"

// MaxKey bounds a key: a longer value is not indexed (its wait is asked
// about every event of its type).
const MaxKey = 512

// SplitMatch finds a match's indexed half, compiling EXPR as a value with
// the step's ancestors; nil when the match is not of that form.
func (e *Env) SplitMatch(src string, ancestors map[string]bool) *MatchKey {
	parsed, iss := e.cel.Parse(src)
	if iss.Err() != nil {
		return nil
	}
	a := parsed.NativeRep()
	root := a.Expr()
	if root.Kind() != celast.CallKind || root.AsCall().FunctionName() != operators.Equals || len(root.AsCall().Args()) != 2 {
		return nil
	}
	args := root.AsCall().Args()
	for i := range 2 {
		path, ok := eventPath(args[i])
		other := args[1-i]
		if !ok || readsEvent(other) {
			continue
		}
		text, err := parser.Unparse(other, a.SourceInfo())
		if err != nil {
			return nil
		}
		prg, err := e.Compile(text, ancestors)
		if err != nil {
			return nil
		}
		return &MatchKey{Path: path, Value: prg}
	}
	return nil
}

// eventPath is the path of a selection chain rooted at event
// (event.data.order: data, order).
func eventPath(x celast.Expr) ([]string, bool) {
	var rev []string
	for x.Kind() == celast.SelectKind {
		sel := x.AsSelect()
		if sel.IsTestOnly() {
			return nil, false
		}
		rev = append(rev, sel.FieldName())
		x = sel.Operand()
	}
	if x.Kind() != celast.IdentKind || root(x.AsIdent()) != "event" || len(rev) == 0 {
		return nil, false
	}
	path := make([]string, len(rev))
	for i, f := range rev {
		path[len(rev)-1-i] = f
	}
	return path, true
}

// readsEvent reports whether x names event anywhere.
func readsEvent(x celast.Expr) bool {
	for _, d := range celast.MatchDescendants(celast.NavigateExpr(nil, x), celast.KindMatcher(celast.IdentKind)) {
		if root(d.AsIdent()) == "event" {
			return true
		}
	}
	return false
}

// Key is the key of a value at path (a JSON value, as Eval returns and
// FromJSON reads): false for a list, a map, or a value past MaxKey.
// Numbers are keyed as CEL's == compares an int with a double, by their
// float64 value: 2 and 2.0 are one key, and so are two integers past 2^53
// that the same double stands for (a key may match too much, never too
// little: the match decides).
func Key(path []string, v any) (string, bool) {
	var val string
	switch x := v.(type) {
	case nil:
		val = "z"
	case bool:
		val = "b" + strconv.FormatBool(x)
	case int64:
		val = number(float64(x))
	case uint64:
		val = number(float64(x))
	case float64:
		val = number(x)
	case string:
		val = "s" + x
	default:
		return "", false
	}
	k := PathKey(path) + keySep + val
	if len(k) > MaxKey {
		return "", false
	}
	return k, true
}

// number is a number's key: its float64 value, one way.
func number(f float64) string { return "n" + strconv.FormatFloat(f, 'g', -1, 64) }

// PathKey is a path as a wait's match_path keeps it.
func PathKey(path []string) string { return strings.Join(path, keySep) }

// KeyAt is the key an event (its JSON value as FromJSON reads it: id,
// type, source, time, data) offers at path (PathKey's form): false when
// it has no scalar there.
func KeyAt(event map[string]any, path string) (string, bool) {
	parts := strings.Split(path, keySep)
	var v any = event
	for _, f := range parts {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = m[f]; !ok {
			return "", false
		}
	}
	return Key(parts, v)
}
