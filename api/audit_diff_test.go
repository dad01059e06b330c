package api

import (
	"strings"
	"testing"
)

// diffJSON descends into objects, compares everything else whole, keeps
// numbers' digits, tells an absent field ("") from null, and quotes keys
// that a dot would make ambiguous.
func TestDiffJSON(t *testing.T) {
	for _, tt := range []struct {
		name, before, after string
		want                []string // path before→after
	}{
		{"same", `{"a":1,"b":{"c":[1,2]}}`, `{"b":{"c":[1,2]},"a":1}`, nil},
		{"nested", `{"spec":{"schedule":{"cron":"0 2 * * *","timezone":"UTC"}}}`, `{"spec":{"schedule":{"cron":"0 3 * * *","timezone":"UTC"}}}`,
			[]string{`spec.schedule.cron "0 2 * * *"→"0 3 * * *"`}},
		{"arrays whole", `{"steps":[{"id":"a"},{"id":"b"}]}`, `{"steps":[{"id":"a"},{"id":"c"}]}`,
			[]string{`steps [{"id":"a"},{"id":"b"}]→[{"id":"a"},{"id":"c"}]`}},
		{"added and removed", `{"a":1,"gone":{"x":true}}`, `{"a":1,"new":{"y":null}}`,
			[]string{`gone.x true→`, `new.y →null`}},
		{"null is not absent", `{"a":null}`, `{}`, []string{`a null→`}},
		{"object to scalar", `{"a":{"b":1}}`, `{"a":"x"}`, []string{`a {"b":1}→"x"`}},
		{"big numbers keep their digits", `{"v":9007199254740993}`, `{"v":9007199254740992}`, []string{`v 9007199254740993→9007199254740992`}},
		{"number spelling", `{"v":1.0}`, `{"v":1}`, []string{`v 1.0→1`}},
		{"quoted keys", `{"labels":{"app.kubernetes.io/name":"a","team":"x"}}`, `{"labels":{"app.kubernetes.io/name":"b","team":"x"}}`,
			[]string{`labels["app.kubernetes.io/name"] "a"→"b"`}},
		{"no html escaping", `{"url":"http://h/?a=1&b=<2>"}`, `{"url":"http://h/"}`, []string{`url "http://h/?a=1&b=<2>"→"http://h/"`}},
		{"create", ``, `{"id":"x","spec":{"cron":"c"}}`, []string{`id →"x"`, `spec.cron →"c"`}},
		{"hard delete", `{"id":"x"}`, ``, []string{`id "x"→`}},
		{"neither", ``, ``, nil},
	} {
		got, err := diffJSON([]byte(tt.before), []byte(tt.after))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var s []string
		for _, c := range got {
			s = append(s, c.GetPath()+" "+c.GetBefore()+"→"+c.GetAfter())
		}
		if strings.Join(s, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, s, tt.want)
		}
	}
	if _, err := diffJSON([]byte(`{"a":`), nil); err == nil {
		t.Error("broken JSON: no error")
	}
}
