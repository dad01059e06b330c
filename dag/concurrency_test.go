package dag

import (
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/dag/expr"
)

const keyedJob = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: sync}
spec:
  schedule: {cron: "0 * * * *"}
  params: {customer: {type: string, default: "42"}}
  concurrency:
    - key: "customer=${{ params.customer }}"
      limit: 1
      on_limit: queue
  steps:
    - name: a
      run: {handler: h}
`

// A job's concurrency keys decode, default its overlap to allow, and
// evaluate over its params; every mistake is refused naming its field.
func TestConcurrencyKeysDecodeAndEvaluate(t *testing.T) {
	docs, es := Decode("sync.yaml", []byte(keyedJob))
	if len(es) > 0 {
		t.Fatal(es)
	}
	spec := docs[0].Resource.Spec
	if spec.Overlap != OverlapAllow || len(spec.Concurrency) != 1 || spec.Concurrency[0].Action() != OnLimitQueue {
		t.Fatalf("spec: overlap %s, %+v", spec.Overlap, spec.Concurrency)
	}
	k, xes := CompileConcurrencyKeys(&spec)
	if len(xes) > 0 {
		t.Fatal(xes)
	}
	v, err := k.Values(expr.Vars{Params: map[string]any{"customer": "7"}})
	if err != nil || len(v) != 1 || v[0] != "customer=7" {
		t.Fatalf("values %q (%v)", v, err)
	}
	if _, err := k.Values(expr.Vars{Params: map[string]any{"customer": strings.Repeat("x", 300)}}); err == nil || !strings.Contains(err.Error(), "concurrency[0].key: evaluates to 309 bytes") {
		t.Errorf("a key past the bound: %v", err)
	}
	if _, err := k.Values(expr.Vars{Params: map[string]any{"customer": "a\nb"}}); err == nil || !strings.Contains(err.Error(), "control character") {
		t.Errorf("a key with a line break: %v", err)
	}
	for _, c := range []struct{ edit, want string }{
		{"limit: 1\n", "spec.concurrency[0].limit: 0 is outside 1..10000"},
		{"on_limit: queue\n", `spec.concurrency[0].on_limit: "later" is not one of queue, cancel_newest, cancel_running`},
		{`key: "customer=${{ params.customer }}"` + "\n", "spec.concurrency[0].key: "},
		{"concurrency:\n", "spec.overlap: a job with concurrency keys runs with overlap: allow"},
	} {
		y := keyedJob
		switch c.edit {
		case "limit: 1\n":
			y = strings.Replace(y, "limit: 1\n", "limit: 0\n", 1)
		case "on_limit: queue\n":
			y = strings.Replace(y, "on_limit: queue\n", "on_limit: later\n", 1)
		case "concurrency:\n":
			y = strings.Replace(y, "concurrency:\n", "overlap: skip\n  concurrency:\n", 1)
		default:
			y = strings.Replace(y, c.edit, `key: "${{ params.nope }}"`+"\n", 1)
		}
		_, es := Decode("sync.yaml", []byte(y))
		if len(es) == 0 || !strings.Contains(es.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.edit, es, c.want)
		}
	}
}
