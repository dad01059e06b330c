package dag

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

const validJob = `apiVersion: orrery.dev/v1
kind: Job
metadata:
  name: nightly-sales
  namespace: analytics
  labels: {team: data}
spec:
  schedule: {cron: "0 2 * * *", timezone: America/New_York}
  misfire: fire_once
  overlap: skip
  defaults:
    queue: etl
    priority: normal
    timeout: 30m
    retry: {max_attempts: 3, initial: 10s, max: 10m}
  steps:
    - name: extract
      run: {http: {url: "https://etl.internal/extract", method: POST}}
      payload: {source: pos}
    - name: transform
      needs: [extract]
      run: {command: {argv: ["/opt/etl/transform", "--date", "{{ .ScheduledFor }}"]}}
    - name: load
      needs: [transform]
      queue: warehouse
      run: {handler: load-warehouse}
    - name: report
      needs: [load]
      trigger_rule: all_done
      run: {http: {url: "https://hooks.internal/etl-done", headers: {Authorization: "secret://env/HOOK_TOKEN"}}}
`

func TestDecodeValidJob(t *testing.T) {
	docs, es := Decode("etl.yaml", []byte(validJob+"---\n"+strings.ReplaceAll(validJob, "nightly-sales", "hourly-sales")))
	if len(es) > 0 {
		t.Fatal(es)
	}
	if len(docs) != 2 || docs[1].Line != 32 {
		t.Fatalf("got %d documents (second at line %d)", len(docs), docs[len(docs)-1].Line)
	}
	r := docs[0].Resource
	if r.Metadata.Name != "nightly-sales" || len(r.Spec.Steps) != 4 || string(r.Spec.Steps[0].Payload) != `{"source":"pos"}` {
		t.Fatalf("decoded %+v", r)
	}
	if r.Spec.Defaults.Timeout.Minutes() != 30 || r.Spec.Steps[0].Run.HTTP.Method != "POST" || r.Spec.Steps[1].TriggerRule != TriggerAllSuccess {
		t.Fatalf("defaults not applied: %+v", r.Spec)
	}
}

func TestDecodeRunShorthand(t *testing.T) {
	docs, es := Decode("one.yaml", []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: ping}
spec:
  schedule: {cron: "@every 90s"}
  run: {http: {url: "http://127.0.0.1:9/ping"}}
  payload: {hello: world}
`))
	if len(es) > 0 {
		t.Fatal(es)
	}
	s := docs[0].Resource.Spec
	if len(s.Steps) != 1 || s.Steps[0].Name != MainStep || s.Run != nil || string(s.Steps[0].Payload) != `{"hello":"world"}` {
		t.Fatalf("run: was not normalized into one step: %+v", s)
	}
	if docs[0].Resource.Metadata.Namespace != DefaultNamespace {
		t.Fatal("namespace default not applied")
	}
}

func TestDecodeErrorsNameFileLineAndField(t *testing.T) {
	tests := []struct {
		name string
		edit func(string) string
		want string // file:line:col: field: message prefix
	}{
		{"bad minute", func(s string) string { return strings.Replace(s, `"0 2 * * *"`, `"61 2 * * *"`, 1) },
			`etl.yaml:8:14: spec.schedule.cron: minute field "61"`},
		{"unknown zone", func(s string) string { return strings.Replace(s, "America/New_York", "America/Atlantis", 1) },
			`etl.yaml:8:33: spec.schedule.timezone: unknown IANA time zone "America/Atlantis"`},
		{"unknown field", func(s string) string {
			return strings.Replace(s, "  overlap: skip\n", "  overlap: skip\n  retries: 3\n", 1)
		},
			`etl.yaml:11:3: spec.retries: unknown field "retries"`},
		{"unknown nested field", func(s string) string { return strings.Replace(s, "method: POST", "verb: POST", 1) },
			`etl.yaml:18:57: spec.steps[0].run.http.verb: unknown field "verb"`},
		{"bad name", func(s string) string { return strings.Replace(s, "name: nightly-sales", "name: Nightly Sales", 1) },
			`etl.yaml:4:3: metadata.name: "Nightly Sales" must start`},
		{"long name", func(s string) string {
			return strings.Replace(s, "name: nightly-sales", "name: "+strings.Repeat("a", 64), 1)
		},
			`etl.yaml:4:3: metadata.name: is 64 characters; the limit is 63`},
		{"duplicate step", func(s string) string { return strings.Replace(s, "name: load", "name: extract", 1) },
			`etl.yaml:23:7: spec.steps[2].name: duplicate step name "extract"`},
		{"unknown needs", func(s string) string { return strings.Replace(s, "needs: [transform]", "needs: [transfrom]", 1) },
			`etl.yaml:24:15: spec.steps[2].needs[0]: unknown step "transfrom"`},
		{"cycle", func(s string) string { return strings.Replace(s, "needs: [extract]", "needs: [extract, load]", 1) },
			`spec.steps[1].needs[1]: cycle: transform -> load -> transform`},
		{"negative timeout", func(s string) string { return strings.Replace(s, "timeout: 30m", "timeout: -5m", 1) },
			`etl.yaml:14:5: spec.defaults.timeout: -5m0s must be positive`},
		{"negative retries", func(s string) string { return strings.Replace(s, "max_attempts: 3", "max_attempts: -1", 1) },
			`etl.yaml:15:13: spec.defaults.retry.max_attempts: -1 is outside`},
		{"not a duration", func(s string) string { return strings.Replace(s, "initial: 10s", "initial: soon", 1) },
			`etl.yaml:15:5: spec.defaults.retry: "soon" is not a duration`},
		{"unknown executor", func(s string) string {
			return strings.Replace(s, "run: {handler: load-warehouse}", "run: {lambda: x}", 1)
		},
			`etl.yaml:26:13: spec.steps[2].run.lambda: unknown field "lambda"`},
		{"no executor", func(s string) string { return strings.Replace(s, "run: {handler: load-warehouse}", "run: {}", 1) },
			`etl.yaml:26:12: spec.steps[2].run: give exactly one executor`},
		{"bad misfire", func(s string) string { return strings.Replace(s, "misfire: fire_once", "misfire: sometimes", 1) },
			`etl.yaml:9:3: spec.misfire: "sometimes" is not one of`},
		{"bad at", func(s string) string {
			return strings.Replace(s, `{cron: "0 2 * * *", timezone: America/New_York}`, `{at: "next tuesday"}`, 1)
		},
			`etl.yaml:8:14: spec.schedule.at: "next tuesday" is not an RFC 3339 instant`},
		{"second cron of a list", func(s string) string {
			return strings.Replace(s, `cron: "0 2 * * *"`, `cron: ["0 2 * * *", "0 61 * * *"]`, 1)
		},
			`etl.yaml:8:34: spec.schedule.cron[1]: hour field "61"`},
		{"end before start", func(s string) string {
			return strings.Replace(s, `timezone: America/New_York}`, `timezone: America/New_York, start: "2027-01-01T00:00:00Z", end: "2026-01-01T00:00:00Z"}`, 1)
		},
			`etl.yaml:8:92: spec.schedule.end: 2026-01-01T00:00:00Z is not after start`},
		{"excluded date", func(s string) string {
			return strings.Replace(s, `timezone: America/New_York}`, `timezone: America/New_York, exclude: {dates: [2026-12-24, 2026-13-01]}}`, 1)
		},
			`etl.yaml:8:91: spec.schedule.exclude.dates[1]: "2026-13-01" is not a date`},
		{"jitter too long", func(s string) string {
			return strings.Replace(s, `timezone: America/New_York}`, `timezone: America/New_York, jitter: 25h}`, 1)
		},
			`etl.yaml:8:61: spec.schedule.jitter: 25h0m0s is not shorter than the shortest wait between two instants (23h0m0s, before 2026-03-09T06:00:00Z)`},
		{"after itself", func(s string) string {
			return strings.Replace(s, `timezone: America/New_York}`, `timezone: America/New_York, after: {job: nightly-sales}}`, 1)
		},
			`etl.yaml:8:69: spec.schedule.after.job: names this job`},
		{"after an unknown outcome", func(s string) string {
			return strings.Replace(s, `timezone: America/New_York}`, `timezone: America/New_York, after: {job: load, on: [succeeded, ended]}}`, 1)
		},
			`spec.schedule.after.on[1]: "ended" is not one of`},
		{"event of no type", func(s string) string {
			return strings.Replace(s, `timezone: America/New_York}`, `timezone: America/New_York, event: {type: ""}}`, 1)
		},
			`spec.schedule.event.type: name the event type`},
		{"event type with a space", func(s string) string {
			return strings.Replace(s, `timezone: America/New_York}`, `timezone: America/New_York, event: {type: "order paid"}}`, 1)
		},
			`spec.schedule.event.type: "order paid": letters, digits and . _ - : /`},
		{"event filter not a bool", func(s string) string {
			return strings.Replace(s, `timezone: America/New_York}`, `timezone: America/New_York, event: {type: order.paid, filter: "${{ 1 + 2 }}"}}`, 1)
		},
			`spec.schedule.event.filter: ${{ 1 + 2 }}: a condition is a bool; this is a int`},
		{"event filter reads a param", func(s string) string {
			return strings.Replace(s, `timezone: America/New_York}`, `timezone: America/New_York, event: {type: order.paid, filter: "${{ params.x == 1 }}"}}`, 1)
		},
			`spec.schedule.event.filter: ${{ params.x == 1 }}: no param "x"`},
		{"event filter with text around it", func(s string) string {
			return strings.Replace(s, `timezone: America/New_York}`, `timezone: America/New_York, event: {type: order.paid, filter: "x ${{ true }}"}}`, 1)
		},
			`spec.schedule.event.filter: a condition is one ${{ EXPR }} and nothing else`},
		{"wrong type", func(s string) string { return strings.Replace(s, "max_attempts: 3", "max_attempts: three", 1) },
			`etl.yaml:15:5: spec.defaults.retry: cannot unmarshal`},
		{"payload key a list", func(s string) string { return strings.Replace(s, "payload: {source: pos}", "payload: {[a]: pos}", 1) },
			`etl.yaml:19:7: spec.steps[0].payload: payload keys must be text; this key is a list`},
		{"payload key a map, deeper", func(s string) string {
			return strings.Replace(s, "payload: {source: pos}", "payload: {source: [{? {a: 1} : x}]}", 1)
		},
			`etl.yaml:19:7: spec.steps[0].payload: payload keys must be text; this key is a map`},
		{"payload key an alias of a list", func(s string) string {
			return strings.Replace(s, "payload: {source: pos}", "payload: {source: &l [a], *l : x}", 1)
		},
			`etl.yaml:19:7: spec.steps[0].payload: payload keys must be text; this key is a list`},
		{"label key a map", func(s string) string {
			return strings.Replace(s, "labels: {team: data}", "labels:\n    ? {team: 1}\n    : data", 1)
		},
			`etl.yaml:7:7: metadata.labels: cannot unmarshal !!map into string`},
		{"syntax", func(s string) string { return strings.Replace(s, "kind: Job", "kind: [Job", 1) },
			`etl.yaml:`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, es := Decode("etl.yaml", []byte(tt.edit(validJob)))
			if len(es) == 0 {
				t.Fatal("no error")
			}
			if !strings.Contains(es.Error(), tt.want) {
				t.Fatalf("errors:\n%s\nwant one containing %q", es, tt.want)
			}
		})
	}
}

func TestPayloadLimit(t *testing.T) {
	r := Resource{Metadata: Metadata{Name: "big"}, Spec: JobSpec{
		Schedule: scheduleSpec("@daily"),
		Run:      &Executor{Handler: "h"},
		Payload:  Payload(`"` + strings.Repeat("x", MaxPayloadBytes) + `"`),
	}}
	r.Normalize()
	if es := Validate(&r); !strings.Contains(es.Error(), "spec.steps[0].payload: is 262146 bytes; the limit is 262144") {
		t.Fatalf("got %v", es)
	}
	r.Spec.Steps[0].Payload = Payload(`{not json`)
	if es := Validate(&r); !strings.Contains(es.Error(), "spec.steps[0].payload: is not valid JSON") {
		t.Fatalf("got %v", es)
	}
}

// The JSON values of a whole definition are bounded (each becomes an
// object wherever the definition is read whole): payloads, params and job
// steps' params alike; the part that passes the bound is named, once.
func TestDefinitionValuesLimit(t *testing.T) {
	empties := Payload("[" + strings.TrimSuffix(strings.Repeat("[],", 40_000), ",") + "]") // 40,001 values
	r := Resource{Metadata: Metadata{Name: "many"}, Spec: JobSpec{Schedule: scheduleSpec("@daily")}}
	for i := range 6 {
		r.Spec.Steps = append(r.Spec.Steps, Step{Name: fmt.Sprintf("s%d", i), Run: Executor{Handler: "h"}, Payload: empties})
	}
	r.Normalize()
	es := Validate(&r)
	if len(es) != 1 || !strings.Contains(es.Error(), "spec.steps[4]: brings the definition to 200") || !strings.Contains(es.Error(), "the limit is 200000 in all") {
		t.Fatalf("got %v", es)
	}
	r.Spec.Steps = r.Spec.Steps[:4]
	if es := Validate(&r); len(es) != 0 {
		t.Fatalf("160,004 payload values: %v", es)
	}

	// Params count too: 100 params whose enums hold 1,000 values each
	// (100,000), with the steps' 160,004, pass the bound at a step.
	r.Spec.Params = map[string]Param{}
	enum := make([]Payload, 10)
	for i := range enum {
		enum[i] = Payload("[" + strings.TrimSuffix(strings.Repeat("[],", 98), ",") + ", " + strconv.Itoa(i) + "]") // 100 values
	}
	for i := range MaxParams {
		r.Spec.Params[fmt.Sprintf("p%02d", i)] = Param{Type: "array", Enum: enum}
	}
	if es := Validate(&r); len(es) != 1 || !strings.Contains(es.Error(), "spec.steps[2]: brings the definition to 2") {
		t.Fatalf("params and steps together: %v", es)
	}
	r.Spec.Steps = r.Spec.Steps[:1]
	if es := Validate(&r); len(es) != 0 {
		t.Fatalf("100,000 values of params and 40,001 of a payload: %v", es)
	}

	// Job steps' params count, and are at most a run's params.
	r.Spec.Params = nil
	r.Spec.Steps = append(r.Spec.Steps[:1],
		Step{Name: "call", Run: Executor{Job: &JobCall{Name: "child", Params: Payload(`{"a": ` + string(empties) + `}`)}}},
		Step{Name: "call2", Run: Executor{Job: &JobCall{Name: "child", Params: Payload(`{"a": ` + string(empties) + `}`)}}})
	r.Normalize()
	if es := Validate(&r); len(es) != 2 || !strings.Contains(es.Error(), "spec.steps[1].run.job.params: is 120008 bytes as JSON; a run's params are at most 65536") {
		t.Fatalf("job steps' params: %v", es)
	}
}

// A param's enum is bounded in bytes and in values: 100 lists of 6,800
// empty arrays (2 MB, which every reader of the job would carry) is not
// an enum.
func TestParamEnumBounds(t *testing.T) {
	big := Payload("[" + strings.TrimSuffix(strings.Repeat("[],", 6_800), ",") + "]")
	enum := make([]Payload, MaxParamEnum)
	for i := range enum {
		enum[i] = append(Payload(nil), big...)
		enum[i] = append(enum[i][:len(enum[i])-1], []byte(", "+strconv.Itoa(i)+"]")...)
	}
	r := Resource{Metadata: Metadata{Name: "enum"}, Spec: JobSpec{Schedule: scheduleSpec("@daily"), Run: &Executor{Handler: "h"},
		Params: map[string]Param{"p": {Type: "array", Enum: enum}}}}
	r.Normalize()
	if es := Validate(&r); len(es) != 1 || !strings.Contains(es.Error(), "spec.params.p.enum: is 2040") || !strings.Contains(es.Error(), "the limit is 16384") {
		t.Fatalf("2 MB of enum: %v", es)
	}
	many := make([]Payload, 10)
	for i := range many {
		many[i] = Payload(`[` + strings.TrimSuffix(strings.Repeat("0,", 150), ",") + `, ` + strconv.Itoa(i) + `]`) // 152 values, 304 bytes
	}
	r.Spec.Params["p"] = Param{Type: "array", Enum: many}
	if es := Validate(&r); len(es) != 1 || !strings.Contains(es.Error(), "spec.params.p.enum: holds 1520 JSON values; the limit is 1000") {
		t.Fatalf("1,520 values of enum: %v", es)
	}
}

func TestLargePipelinesAreAccepted(t *testing.T) {
	for _, shape := range []string{"chain", "fan"} {
		var b strings.Builder
		b.WriteString("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: big}\nspec:\n  schedule: {cron: \"@daily\"}\n  steps:\n")
		for i := range 5000 {
			fmt.Fprintf(&b, "    - name: s%04d\n      run: {handler: h}\n", i)
			switch {
			case i == 0:
			case shape == "chain":
				fmt.Fprintf(&b, "      needs: [s%04d]\n", i-1)
			default:
				b.WriteString("      needs: [s0000]\n")
			}
		}
		docs, es := Decode("big.yaml", []byte(b.String()))
		if len(es) > 0 || len(docs[0].Resource.Spec.Steps) != 5000 {
			t.Fatalf("%s of 5,000 steps: %v", shape, es)
		}
	}
	r := Resource{Metadata: Metadata{Name: "huge"}, Spec: JobSpec{Schedule: scheduleSpec("@daily")}}
	for i := range MaxSteps + 1 {
		r.Spec.Steps = append(r.Spec.Steps, Step{Name: fmt.Sprintf("s%05d", i), Run: Executor{Handler: "h"}})
	}
	r.Normalize()
	if es := Validate(&r); !strings.Contains(es.Error(), "spec.steps: has 10001 steps; the limit is 10000") {
		t.Fatalf("got %v", es)
	}
}
