package expr

import (
	"strings"
	"testing"
)

// A match of the form event.PATH == EXPR (either way round) whose EXPR
// does not read event is split into its indexed half; any other form is
// not; the keys of a value and of an event's fields agree, numbers
// across int and double as CEL's == does.
func TestMatchKeys(t *testing.T) {
	env, err := NewEnv(map[string]Type{"order": String, "n": Number}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]string{
		"event.data.order == run.event.data.order": "data\x1forder",
		"params.order == event.data.order":         "data\x1forder",
		"event.id == params.order + '-x'":          "id",
		"event.data.order == event.data.other":     "",
		"event.data.order != params.order":         "",
		"event.data.a == params.order && true":     "",
		"has(event.data.order) == true":            "",
		"event.data['order'] == params.order":      "",
		"event == run.event":                       "",
	} {
		k := env.SplitMatch(src, nil)
		switch {
		case want == "" && k != nil:
			t.Errorf("%s: split as %v", src, k.Path)
		case want != "" && (k == nil || strings.Join(k.Path, "\x1f") != want):
			t.Errorf("%s: %+v, want path %q", src, k, want)
		}
	}
	k := env.SplitMatch("event.data.n == params.n", nil)
	v, err := k.Value.Eval(env.Activation(Vars{Params: map[string]any{"n": float64(42)}}))
	if err != nil {
		t.Fatal(err)
	}
	key, ok := Key(k.Path, v)
	keys, complete := EventKeys(map[string]any{"id": "e1", "data": map[string]any{"n": int64(42), "list": []any{1}, "deep": map[string]any{"x": true}}}, 10)
	if !ok || !complete || len(keys) != 3 || !contains(keys, key) {
		t.Errorf("key %q (%t) not among the event's %q (%t)", key, ok, keys, complete)
	}
	if _, complete := EventKeys(map[string]any{"a": 1.0, "b": 2.0, "c": "x"}, 2); complete {
		t.Error("3 fields offered within a bound of 2")
	}
	if _, ok := Key([]string{"a"}, strings.Repeat("x", MaxKey)); ok {
		t.Error("a value past MaxKey is a key")
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
