package dag

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const sleepJob = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: remind}
spec:
  schedule: {cron: "0 2 * * *"}
  params: {at: {type: string, default: "2026-12-01T09:00:00Z"}}
  steps:
    - name: first
      run: {handler: h}
    - name: nap
      needs: [first]
      sleep: 24h
    - name: until
      needs: [nap]
      sleep: {until: "${{ params.at }}"}
    - name: last
      needs: [until]
      run: {handler: h}
`

// A step sleeps for a duration or until an instant; its JSON form (what
// the API and the database keep) reads back the same; every mistake is
// refused naming its field and line, with nothing else of the step
// allowed that only a step that runs somewhere takes.
func TestSleepDecodesAndIsBounded(t *testing.T) {
	docs, es := Decode("remind.yaml", []byte(sleepJob))
	if len(es) > 0 {
		t.Fatal(es)
	}
	steps := docs[0].Resource.Spec.Steps
	if s := steps[1].Sleep; s == nil || s.For != 24*time.Hour || !steps[1].Parks() || !steps[1].OnNoWorker() {
		t.Fatalf("nap: %+v", s)
	}
	if s := steps[2].Sleep; s == nil || s.Until != "${{ params.at }}" {
		t.Fatalf("until: %+v", s)
	}
	b, err := json.Marshal(steps[1:3])
	if err != nil {
		t.Fatal(err)
	}
	var back []Step
	if err := json.Unmarshal(b, &back); err != nil || back[0].Sleep.For != 24*time.Hour || back[1].Sleep.Until != "${{ params.at }}" {
		t.Fatalf("JSON %s read back %+v %+v (%v)", b, back[0].Sleep, back[1].Sleep, err)
	}
	if _, xes := CompileExprs(&docs[0].Resource.Spec); len(xes) > 0 {
		t.Fatal(xes)
	}
	for _, c := range []struct{ edit, want string }{
		{"sleep: 24h\n", `remind.yaml:12:7: spec.steps[1].sleep: 0s is outside 1s..8784h`},
		{"sleep: 9000h\n", `spec.steps[1].sleep: 9000h0m0s is outside 1s..8784h (366 days)`},
		{"sleep: soon\n", `remind.yaml:12:7: spec.steps[1].sleep: "soon" is not a duration`},
		{"sleep: {until: tomorrow}\n", `spec.steps[1].sleep.until: "tomorrow" is neither an RFC 3339 instant nor ${{ EXPR }}`},
		{"sleep: {until: x, for: 1h}\n", `spec.steps[1].sleep: sleep is a duration`},
		{"sleep: 1h\n      run: {handler: h}\n", `spec.steps[1].run: a step that sleeps runs nothing`},
		{"sleep: 1h\n      retry: {max_attempts: 2}\n", `spec.steps[1].retry: a step that sleeps runs nowhere: it takes no retry`},
		{"sleep: 1h\n      queue: etl\n", `spec.steps[1].queue: a step that sleeps runs nowhere`},
		{"sleep: 1h\n      for_each: \"${{ [1] }}\"\n", `spec.steps[1].for_each: a step that sleeps runs nowhere`},
		{"sleep: {until: \"${{ params.nope }}\"}\n", `spec.steps[1].sleep.until`},
	} {
		y := strings.Replace(sleepJob, "sleep: 24h\n", c.edit, 1)
		if c.edit == "sleep: 24h\n" {
			y = strings.Replace(sleepJob, "sleep: 24h\n", "sleep: 0s\n", 1)
		}
		_, es := Decode("remind.yaml", []byte(y))
		if len(es) == 0 || !strings.Contains(es.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.edit, es, c.want)
		}
	}
}

// A step waits for an event of a type, with a match and a timeout; every
// mistake is refused naming its field.
func TestWaitDecodesAndIsBounded(t *testing.T) {
	y := strings.Replace(sleepJob, "sleep: 24h\n", "wait: {event: order.shipped, match: \"${{ event.data.order == run.event.data.order }}\", timeout: 72h}\n", 1)
	docs, es := Decode("remind.yaml", []byte(y))
	if len(es) > 0 {
		t.Fatal(es)
	}
	st := docs[0].Resource.Spec.Steps[1]
	if w := st.Wait; w == nil || w.Event != "order.shipped" || w.Timeout.Duration != 72*time.Hour || !st.Parks() {
		t.Fatalf("wait: %+v", w)
	}
	x, xes := CompileExprs(&docs[0].Resource.Spec)
	if len(xes) > 0 || x.Step("nap") == nil {
		t.Fatalf("the match did not compile: %v", xes)
	}
	for _, c := range []struct{ edit, want string }{
		{"wait: {event: order.shipped}\n", "spec.steps[1].wait.timeout: name how long the step waits at most"},
		{"wait: {event: order.shipped, timeout: 9000h}\n", "spec.steps[1].wait.timeout: 9000h0m0s is outside 1s..8784h"},
		{"wait: {event: \"order shipped\", timeout: 1h}\n", "spec.steps[1].wait.event:"},
		{"wait: {event: order.shipped, timeout: 1h, match: \"event.data.x\"}\n", "spec.steps[1].wait.match: a match is one ${{ EXPR }}"},
		{"wait: {event: order.shipped, timeout: 1h, match: \"${{ event.data.x +}}\"}\n", "spec.steps[1].wait.match"},
		{"wait: {event: order.shipped, timeout: 1h, on_timeout: skip}\n", `unknown field "on_timeout"`},
		{"wait: {event: order.shipped, timeout: 1h}\n      sleep: 1h\n", "spec.steps[1].wait: a step sleeps or waits, not both"},
		{"wait: {event: order.shipped, timeout: 1h}\n      retry: {max_attempts: 2}\n", "spec.steps[1].retry: a step that waits runs nowhere"},
	} {
		_, es := Decode("remind.yaml", []byte(strings.Replace(sleepJob, "sleep: 24h\n", c.edit, 1)))
		if len(es) == 0 || !strings.Contains(es.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.edit, es, c.want)
		}
	}
}
