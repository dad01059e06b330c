package dag

import (
	"strings"
	"testing"
)

// jobWith is a one-step job whose schedule and payload lines are given, so
// that positions are easy to predict: schedule on line 5, payload on 7.
func jobWith(schedule, payload string) string {
	return "apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: probe}\nspec:\n" +
		"  schedule: " + schedule + "\n" +
		"  run: {handler: h}\n" +
		"  payload: " + payload + "\n"
}

// Hostile or impossible input is rejected by validate with file:line:col,
// the field and the reason; rare but real schedules and exact numbers pass.
func TestDecodeRejectsHostileInput(t *testing.T) {
	deep := strings.Repeat("[", MaxPayloadDepth+1) + strings.Repeat("]", MaxPayloadDepth+1)
	deepest := strings.Repeat("[", MaxPayloadDepth) + strings.Repeat("]", MaxPayloadDepth)
	tests := []struct {
		name     string
		schedule string
		payload  string
		want     string // "" means valid
	}{
		{"zero time", `{at: 0001-01-01T00:00:00Z}`, `{}`,
			`probe.yaml:5:14: spec.schedule.at: "0001-01-01T00:00:00Z" is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z`},
		{"zero time quoted", `{at: "0001-01-01T00:00:00Z"}`, `{}`, `probe.yaml:5:14: spec.schedule.at:`},
		{"year zero", `{at: "0000-01-01T00:00:00Z"}`, `{}`, `spec.schedule.at: "0000-01-01T00:00:00Z" is outside`},
		{"before 1970", `{at: "1969-12-31T23:59:59Z"}`, `{}`, `spec.schedule.at:`},
		{"after 9999 by offset", `{at: "9999-12-31T23:00:00-05:00"}`, `{}`, `spec.schedule.at:`},
		{"epoch", `{at: "1970-01-01T00:00:00Z"}`, `{}`, ""},
		{"last second", `{at: "9999-12-31T23:59:59Z"}`, `{}`, ""},

		{"31 February", `{cron: "0 0 31 2 *"}`, `{}`, `probe.yaml:5:14: spec.schedule.cron: "0 0 31 2 *" never fires: no date in the calendar has day-of-month 31 in month 2`},
		{"30 February in a zone", `{cron: "0 0 30 2 *", timezone: Europe/Paris}`, `{}`, `spec.schedule.cron: "0 0 30 2 *" never fires`},
		{"31 November", `{cron: "0 9 31 11 *"}`, `{}`, `never fires`},
		{"29 February on Sundays", `{cron: "0 0 29 2 */7"}`, `{}`, `spec.schedule.cron: "0 0 29 2 */7" fires too rarely: up to 40 years pass between two fires`},
		{"29 February", `{cron: "0 0 29 2 *"}`, `{}`, ""},
		{"29 February or Mondays", `{cron: "0 0 29 2 1"}`, `{}`, ""},
		{"31st", `{cron: "0 0 31 * *"}`, `{}`, ""},

		{"too deep", `{cron: "@daily"}`, deep, `probe.yaml:7:12: spec.steps[0].payload: nests arrays and objects more than 64 levels deep; the limit is 64`},
		{"too deep objects", `{cron: "@daily"}`, strings.Repeat("{a: ", 65) + "1" + strings.Repeat("}", 65), `the limit is 64`},
		{"5,000 deep", `{cron: "@daily"}`, strings.Repeat("[", 5000) + strings.Repeat("]", 5000), `the limit is 64`},
		{"64 deep", `{cron: "@daily"}`, deepest, ""},

		{"2^53+1", `{cron: "@daily"}`, `{id: 9007199254740993}`, `probe.yaml:7:12: spec.steps[0].payload: number 9007199254740993 is beyond ±9007199254740991 (2^53-1), the limit`},
		{"-2^53", `{cron: "@daily"}`, `[-9007199254740992]`, `number -9007199254740992 is beyond`},
		{"beyond uint64", `{cron: "@daily"}`, `{id: 123456789012345678901234567890}`, `is beyond ±9007199254740991`},
		{"float beyond", `{cron: "@daily"}`, `{x: 1.5e300}`, `is beyond ±9007199254740991`},
		{"NUL in a payload", `{cron: "@daily"}`, `{a: [1, "x\0y"]}`, `probe.yaml:7:20: spec.steps[0].payload.a[1]: contains a NUL character`},
		{"NUL in a payload key", `{cron: "@daily"}`, `{"k\0": 1}`, `spec.steps[0].payload.k\x00: contains a NUL character`},
		{"NUL in a time zone", `{cron: "@daily", timezone: "UTC\0"}`, `{}`, `spec.schedule.timezone`},
		{"2^53-1", `{cron: "@daily"}`, `{id: 9007199254740991, neg: -9007199254740991, f: 0.1, big: "9007199254740993"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, es := Decode("probe.yaml", []byte(jobWith(tt.schedule, tt.payload)))
			if tt.want == "" {
				if len(es) > 0 || len(docs) != 1 {
					t.Fatalf("want valid, got %v", es)
				}
				return
			}
			if len(es) != 1 || !strings.Contains(es.Error(), tt.want) {
				t.Fatalf("errors:\n%s\nwant one containing %q", es, tt.want)
			}
		})
	}
}

// Payload numbers come out exactly as written, from YAML and from JSON
// (the stored form), up to the limit.
func TestPayloadNumbersStayExact(t *testing.T) {
	docs, es := Decode("n.yaml", []byte(jobWith(`{cron: "@daily"}`, `{max: 9007199254740991, min: -9007199254740991, small: 1, f: 0.1, e: 1e-7}`)))
	if len(es) > 0 {
		t.Fatal(es)
	}
	want := `{"e":1e-7,"f":0.1,"max":9007199254740991,"min":-9007199254740991,"small":1}`
	if got := string(docs[0].Resource.Spec.Steps[0].Payload); got != want {
		t.Fatalf("YAML payload %s, want %s", got, want)
	}
	var p Payload
	if err := p.UnmarshalJSON([]byte(`{"max": 9007199254740991, "e": 1e-7}`)); err != nil || string(p) != `{"e":1e-7,"max":9007199254740991}` {
		t.Fatalf("JSON payload %s %v", p, err)
	}
}

// A command's other arguments may name the call's fields, and nothing
// else: refused when the job is validated, with the argument's index.
func TestCommandArgumentsNameOnlyCallFields(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"--date={{ .ScheduledFor }}", ""},
		{"{{.RunID}}/{{ .Attempt }}", ""},
		{`{{ \"{{\" }}.State}}`, ""},
		{"{{ range 2000000000000 }}{{ end }}", `probe.yaml:6:39: spec.steps[0].run.command.argv[1]: {{ range 2000000000000 }} is not one of {{ .ScheduledFor }}`},
		{`{{ printf \"%01000000d\" 0 }}`, `spec.steps[0].run.command.argv[1]: {{ printf "%01000000d" 0 }} is not one of`},
		{"{{ .Env }}", `argv[1]: {{ .Env }} is not one of`},
		{"{{ .Step", `argv[1]: "{{ .Step": {{ without a closing }}`},
	} {
		doc := "apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: probe}\nspec:\n  schedule: {cron: \"@daily\"}\n" +
			"  run: {command: {argv: [\"/bin/echo\", \"" + tc.arg + "\"]}}\n"
		_, es := Decode("probe.yaml", []byte(doc))
		got := ""
		if len(es) > 0 {
			got = es.Error()
		}
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("argument %q: got %q, want %q", tc.arg, got, tc.want)
		}
	}
}

// A command's program is an absolute path, never a template: workers check
// their allow-list on it, and a template could expand to anything.
func TestCommandProgramIsAbsoluteAndLiteral(t *testing.T) {
	for _, tc := range []struct{ argv0, want string }{
		{"/bin/true", ""},
		{"true", `spec.steps[0].run.command.argv: "true" is not an absolute path`},
		{`/opt/etl/{{ .Job }}`, `spec.steps[0].run.command.argv: "/opt/etl/{{ .Job }}": the program cannot be a template`},
	} {
		doc := "apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: probe}\nspec:\n  schedule: {cron: \"@daily\"}\n" +
			"  run: {command: {argv: [\"" + strings.ReplaceAll(tc.argv0, `"`, `\"`) + "\", \"x\"]}}\n"
		_, es := Decode("probe.yaml", []byte(doc))
		got := ""
		if len(es) > 0 {
			got = es.Error()
		}
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("argv[0] %q: got %q, want %q", tc.argv0, got, tc.want)
		}
	}
}

// A file that is not UTF-8 text is refused with where it stops being
// text (YAML's own error names no line).
func TestDecodeNamesWhereTextEnds(t *testing.T) {
	_, es := Decode("probe.yaml", []byte(jobWith(`{cron: "@daily"}`, "{a: \"x\xffy\"}")))
	if len(es) != 1 || es.Error() != "probe.yaml:7:18: not UTF-8 text (YAML must be)" {
		t.Fatalf("errors: %v", es)
	}
}
