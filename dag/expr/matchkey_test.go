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
	event := map[string]any{"id": "e1", "data": map[string]any{"n": int64(42), "list": []any{1}, "deep": map[string]any{"x": true}}}
	if at, found := KeyAt(event, PathKey(k.Path)); !ok || !found || at != key {
		t.Errorf("the wait's key %q (%t), the event's %q (%t)", key, ok, at, found)
	}
	for _, miss := range []string{PathKey([]string{"data", "list"}), PathKey([]string{"data", "deep"}), PathKey([]string{"data", "nope"}), PathKey([]string{"id", "x"})} {
		if k, ok := KeyAt(event, miss); ok {
			t.Errorf("%q offers %q", miss, k)
		}
	}
	// As CEL compares them: an int and the double equal to it are one key,
	// also past 2^53.
	for _, c := range [][2]any{{int64(2), 2.0}, {int64(9007199254740993), 9007199254740992.0}, {int64(10000000000000000), 1e16}} {
		a, _ := Key([]string{"n"}, c[0])
		b, _ := Key([]string{"n"}, c[1])
		if a != b {
			t.Errorf("%v and %v: keys %q and %q", c[0], c[1], a, b)
		}
	}
	if _, ok := Key([]string{"a"}, strings.Repeat("x", MaxKey)); ok {
		t.Error("a value past MaxKey is a key")
	}
}
