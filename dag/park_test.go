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
		{"wait: {event: order.shipped, timeout: 1h, on_timeout: retry}\n", `spec.steps[1].wait.on_timeout: "retry" is neither fail nor skip`},
		{"wait: {event: order.shipped, timeout: 1h}\n      sleep: 1h\n", "spec.steps[1].wait: a step sleeps, waits or asks for an approval: one of them"},
		{"wait: {event: order.shipped, timeout: 1h}\n      retry: {max_attempts: 2}\n", "spec.steps[1].retry: a step that waits runs nowhere"},
	} {
		_, es := Decode("remind.yaml", []byte(strings.Replace(sleepJob, "sleep: 24h\n", c.edit, 1)))
		if len(es) == 0 || !strings.Contains(es.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.edit, es, c.want)
		}
	}
}

// A step asks for an approval: who may decide, how many, for how long, and
// a message with expressions; every mistake is refused naming its field.
func TestApprovalDecodesAndIsBounded(t *testing.T) {
	y := strings.Replace(sleepJob, "sleep: 24h\n", `approval: {role: admin, principals: [ann, bob], count: 2, separate: true, timeout: 24h, on_timeout: skip, message: "Refund ${{ params.at }}?"}
`, 1)
	docs, es := Decode("remind.yaml", []byte(y))
	if len(es) > 0 {
		t.Fatal(es)
	}
	st := docs[0].Resource.Spec.Steps[1]
	a := st.Approval
	if a == nil || a.DecidedBy() != "admin" || a.Approvers() != 2 || !a.Separate || st.ParkTimeout() != TimeoutSkips || !st.Parks() || !st.OnNoWorker() {
		t.Fatalf("approval: %+v", a)
	}
	if d := (&Approval{}); d.DecidedBy() != "editor" || d.Approvers() != 1 {
		t.Fatalf("defaults: %s %d", d.DecidedBy(), d.Approvers())
	}
	x, xes := CompileExprs(&docs[0].Resource.Spec)
	if len(xes) > 0 || x.Step("nap") == nil {
		t.Fatalf("the message did not compile: %v", xes)
	}
	b, _ := json.Marshal(st)
	var back Step
	if err := json.Unmarshal(b, &back); err != nil || back.Approval == nil || back.Approval.Count != 2 || back.Approval.Timeout.Duration != 24*time.Hour {
		t.Fatalf("JSON %s read back %+v (%v)", b, back.Approval, err)
	}
	for _, c := range []struct{ edit, want string }{
		{"approval: {}\n", "spec.steps[1].approval.timeout: name how long the step waits at most"},
		{"approval: {timeout: 1h, role: worker}\n", `spec.steps[1].approval.role: "worker" is not a role that may decide`},
		{"approval: {timeout: 1h, count: 11}\n", "spec.steps[1].approval.count: 11 is outside 1..10"},
		{"approval: {timeout: 1h, count: 3, principals: [a, b]}\n", "spec.steps[1].approval.count: needs 3 approvals from distinct principals, but principals names 2"},
		{"approval: {timeout: 1h, principals: [a, a]}\n", `spec.steps[1].approval.principals[1]: "a" is named twice`},
		{"approval: {timeout: 1h, principals: [\"\"]}\n", "spec.steps[1].approval.principals[0]: a principal's name"},
		{"approval: {timeout: 1h, on_timeout: later}\n", `spec.steps[1].approval.on_timeout: "later" is neither fail nor skip`},
		{"approval: {timeout: 1h, message: \"${{ params.nope }}\"}\n", "spec.steps[1].approval.message"},
		{"approval: {timeout: 1h, message: \"" + strings.Repeat("x", 2049) + "\"}\n", "spec.steps[1].approval.message: is 2049 bytes; the limit is 2048"},
		{"approval: {timeout: 1h, votes: 2}\n", `unknown field "votes"`},
		{"approval: {timeout: 1h}\n      run: {handler: h}\n", "spec.steps[1].run: a step that asks for an approval runs nothing"},
		{"approval: {timeout: 1h}\n      wait: {event: a.b, timeout: 1h}\n", "a step sleeps, waits or asks for an approval: one of them"},
	} {
		_, es := Decode("remind.yaml", []byte(strings.Replace(sleepJob, "sleep: 24h\n", c.edit, 1)))
		if len(es) == 0 || !strings.Contains(es.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.edit, es, c.want)
		}
	}
}
