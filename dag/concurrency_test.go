package dag

import (
	"slices"
	"strings"
	"testing"
	"time"

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

const keyedStepJob = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: calls}
spec:
  schedule: {cron: "0 * * * *"}
  params: {account: {type: string, default: "a1"}}
  steps:
    - name: plan
      run: {handler: h}
    - name: call-vendor
      needs: [plan]
      concurrency:
        - {key: "${{ params.account }}", limit: 3}
        - {key: "vendor-${{ steps.plan.output.vendor }}", limit: 10}
      run: {handler: h}
`

// A step's concurrency keys compile with its ancestors' outputs and
// evaluate at release; every mistake is refused naming its field.
func TestStepConcurrencyKeys(t *testing.T) {
	docs, es := Decode("calls.yaml", []byte(keyedStepJob))
	if len(es) > 0 {
		t.Fatal(es)
	}
	spec := docs[0].Resource.Spec
	x, xes := CompileExprs(&spec)
	if len(xes) > 0 {
		t.Fatal(xes)
	}
	se := x.Step("call-vendor")
	if !se.HasKeys() || x.Step("plan").HasKeys() || !slices.Contains(se.KeysReads.Steps, "plan") {
		t.Fatalf("keys: %v, reads %+v", se.HasKeys(), se.KeysReads)
	}
	v, lim, err := se.Keys(expr.Vars{Params: map[string]any{"account": "acme"}, Steps: map[string]expr.StepVars{"plan": {Output: map[string]any{"vendor": "x"}}}})
	if err != nil || strings.Join(v, ",") != "acme,vendor-x" || lim[0] != 3 || lim[1] != 10 {
		t.Fatalf("keys %q %v (%v)", v, lim, err)
	}
	if v, lim, err := se.Keys(expr.Vars{Params: map[string]any{"account": "vendor-x"}, Steps: map[string]expr.StepVars{"plan": {Output: map[string]any{"vendor": "x"}}}}); err != nil || len(v) != 1 || lim[0] != 3 {
		t.Errorf("two keys of one value: %q %v (%v), want one, limit 3", v, lim, err)
	}
	if _, _, err := se.Keys(expr.Vars{Params: map[string]any{"account": ""}, Steps: map[string]expr.StepVars{"plan": {Output: map[string]any{"vendor": "x"}}}}); err == nil || !strings.Contains(err.Error(), "concurrency[0].key: evaluates to empty text") {
		t.Errorf("an empty key: %v", err)
	}
	for _, c := range []struct{ from, to, want string }{
		{"limit: 3}", "limit: 0}", "spec.steps[1].concurrency[0].limit: 0 is outside 1..10000"},
		{"limit: 3}", "limit: 3, on_limit: cancel_newest}", `spec.steps[1].concurrency[0].on_limit: "cancel_newest": a step's task at a key's limit waits`},
		{"steps.plan.output.vendor", "steps.later.output.vendor", "spec.steps[1].concurrency[1].key: "},
		{"      run: {handler: h}\n`", "      for_each: \"${{ [1, 2] }}\"\n      run: {handler: h}\n`", "spec.steps[1].concurrency: a step that fans out"},
		{"      run: {handler: h}\n`", "      sleep: 1m\n`", "spec.steps[1].concurrency: a step that parks"},
		{"        - {key: \"${{ params.account }}\", limit: 3}\n", strings.Repeat("        - {key: k, limit: 3}\n", 5), "spec.steps[1].concurrency: names 6 keys; the limit is 4"},
	} {
		y := strings.Replace(keyedStepJob+"`", c.from, c.to, 1)
		y = strings.TrimSuffix(y, "`")
		_, es := Decode("calls.yaml", []byte(y))
		if len(es) == 0 || !strings.Contains(es.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.to, es, c.want)
		}
	}
}

const ratedStepJob = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: calls}
spec:
  schedule: {cron: "0 * * * *"}
  params: {vendor: {type: string, default: "acme"}}
  steps:
    - name: plan
      run: {handler: h}
    - name: call-vendor
      needs: [plan]
      rate_limit: {key: "vendor-${{ params.vendor }}-${{ steps.plan.output.region }}", limit: 100, per: 1m}
      run: {handler: h}
`

// A step's rate limit compiles its key with its ancestors' outputs and
// evaluates it at release; every mistake is refused naming its field and
// line.
func TestStepRateLimit(t *testing.T) {
	docs, es := Decode("calls.yaml", []byte(ratedStepJob))
	if len(es) > 0 {
		t.Fatal(es)
	}
	spec := docs[0].Resource.Spec
	if r := spec.Steps[1].RateLimit; r == nil || r.Limit != 100 || r.Interval() != 600*time.Millisecond {
		t.Fatalf("rate limit %+v", r)
	}
	x, xes := CompileExprs(&spec)
	if len(xes) > 0 {
		t.Fatal(xes)
	}
	se := x.Step("call-vendor")
	if !se.HasKeys() || !slices.Contains(se.KeysReads.Steps, "plan") {
		t.Fatalf("keys: %v, reads %+v", se.HasKeys(), se.KeysReads)
	}
	vars := func(region any) expr.Vars {
		return expr.Vars{Params: map[string]any{"vendor": "acme"}, Steps: map[string]expr.StepVars{"plan": {Output: map[string]any{"region": region}}}}
	}
	if k, r, err := se.RateKey(vars("eu")); err != nil || k != "vendor-acme-eu" || r.Limit != 100 {
		t.Fatalf("key %q %+v (%v)", k, r, err)
	}
	if _, _, err := se.RateKey(vars(strings.Repeat("x", 300))); err == nil || !strings.Contains(err.Error(), "rate_limit.key: evaluates to") {
		t.Errorf("a key past its bound: %v", err)
	}
	for _, c := range []struct{ from, to, want string }{
		{"limit: 100", "limit: 0", "calls.yaml:12:"},
		{"limit: 100", "limit: 0", "spec.steps[1].rate_limit.limit: 0 is outside 1..10000"},
		{"limit: 100", "limit: 20000", "spec.steps[1].rate_limit.limit: 20000 is outside 1..10000"},
		{"per: 1m", "per: 10ms", "spec.steps[1].rate_limit.per: 10ms is outside 1s..24h0m0s"},
		{"per: 1m", "per: 48h", "spec.steps[1].rate_limit.per: 48h0m0s is outside"},
		{"per: 1m", "per: often", "rate_limit"},
		{`key: "vendor-${{ params.vendor }}-${{ steps.plan.output.region }}", `, `key: "", `, "spec.steps[1].rate_limit.key: name the key"},
		{"steps.plan.output.region", "steps.later.output.region", "spec.steps[1].rate_limit.key: "},
		{"params.vendor", "item", "spec.steps[1].rate_limit.key: "},
		{"      run: {handler: h}\n`", "      sleep: 1m\n`", "spec.steps[1].rate_limit: a step that parks"},
		{"      run: {handler: h}\n`", "      for_each: \"${{ [1, 2] }}\"\n      run: {handler: h}\n`", "spec.steps[1].rate_limit: a step that fans out"},
		{", limit: 100, per: 1m}", ", limit: 100, per: 1m, burst: 5}", "burst"},
	} {
		y := strings.Replace(ratedStepJob+"`", c.from, c.to, 1)
		y = strings.TrimSuffix(y, "`")
		_, es := Decode("calls.yaml", []byte(y))
		if len(es) == 0 || !strings.Contains(es.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.to, es, c.want)
		}
	}
}

const debouncedJob = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: deploy}
spec:
  schedule: {event: {type: push}}
  params: {repo: {type: string, default: "web"}}
  debounce: {key: "repo-${{ params.repo }}", period: 30s, max_wait: 5m}
  steps:
    - name: a
      run: {handler: h}
`

// A job's debounce decodes and evaluates its key over a trigger's params;
// every mistake is refused naming its field and line.
func TestDebounce(t *testing.T) {
	docs, es := Decode("deploy.yaml", []byte(debouncedJob))
	if len(es) > 0 {
		t.Fatal(es)
	}
	spec := docs[0].Resource.Spec
	d := spec.Debounce
	if d == nil || d.Period.Duration != 30*time.Second || d.Wait() != 5*time.Minute {
		t.Fatalf("debounce %+v", d)
	}
	k, xes := CompileDebounceKey(&spec)
	if len(xes) > 0 {
		t.Fatal(xes)
	}
	if v, err := k.Value(expr.Vars{Params: map[string]any{"repo": "api"}}); err != nil || v != "repo-api" {
		t.Fatalf("key %q (%v)", v, err)
	}
	if _, err := k.Value(expr.Vars{Params: map[string]any{"repo": strings.Repeat("x", 300)}}); err == nil || !strings.Contains(err.Error(), "debounce.key: evaluates to") {
		t.Errorf("a key past its bound: %v", err)
	}
	if v, err := (*DebounceKey)(nil).Value(expr.Vars{}); err != nil || v != "" {
		t.Errorf("no key: %q (%v)", v, err)
	}
	for _, c := range []struct{ from, to, want string }{
		{"period: 30s", "period: 100ms", "deploy.yaml:7:"},
		{"period: 30s", "period: 100ms", "spec.debounce.period: 100ms is outside 1s..24h0m0s"},
		{"period: 30s", "period: 48h", "spec.debounce.period: 48h0m0s is outside"},
		{"max_wait: 5m", "max_wait: 10s", "spec.debounce.max_wait: 10s is outside the period (30s)..168h0m0s"},
		{"max_wait: 5m", "max_wait: 200h", "spec.debounce.max_wait: 200h0m0s is outside"},
		{"params.repo", "params.nope", "spec.debounce.key: "},
		{"params.repo", "steps.a.output", "spec.debounce.key: "},
		{", max_wait: 5m}", ", max_wait: 5m, leading: true}", "leading"},
	} {
		_, es := Decode("deploy.yaml", []byte(strings.Replace(debouncedJob, c.from, c.to, 1)))
		if len(es) == 0 || !strings.Contains(es.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.to, es, c.want)
		}
	}
}
