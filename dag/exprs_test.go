package dag

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag/expr"
)

// pipeline is the pipeline: params, outputs read by children,
// expressions in a URL, argv and a payload.
const pipeline = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: etl, namespace: data}
spec:
  schedule: {cron: "0 9 * * *"}
  params:
    region:  {type: string, default: eu, enum: [eu, us], description: where to read}
    dry_run: {type: boolean, default: false}
    limit:   {type: integer, default: 10}
  steps:
    - name: list
      run: {http: {url: "https://files.example/list?region=${{ params.region }}"}}
    - name: count
      needs: [list]
      run: {command: {argv: [/opt/etl/count, "${{ steps.list.output.files[0] }}", "--date={{ .ScheduledFor }}"], env: {LIMIT: "${{ params.limit }}"}}}
    - name: publish
      needs: [count]
      payload: {files: "${{ steps.list.output.files }}", day: "${{ run.scheduled_for }}", note: "try ${{ attempt }} of $${{ x }}", n: 1.50}
      run: {http: {url: https://reports.example/publish, headers: {X-Region: "${{ params.region }}", Authorization: "secret://env/TOKEN"}}}
`

func decodeOne(t *testing.T, yaml string) *Resource {
	t.Helper()
	docs, es := Decode("p.yaml", []byte(yaml))
	if len(es) > 0 {
		t.Fatalf("Decode: %v", es)
	}
	return &docs[0].Resource
}

func TestPipelineEvaluates(t *testing.T) {
	r := decodeOne(t, pipeline)
	x, es := CompileExprs(&r.Spec)
	if len(es) > 0 {
		t.Fatal(es)
	}
	if got := x.Step("list").Reads; !got.Params || len(got.Steps) != 0 {
		t.Errorf("list reads %+v", got)
	}
	if got := x.Step("publish").Reads; !reflect.DeepEqual(got.Steps, []string{"list"}) {
		t.Errorf("publish reads %+v", got)
	}
	params, err := r.Spec.RunParams(map[string]Payload{"region": Payload(`"us"`)})
	if err != nil {
		t.Fatal(err)
	}
	var pv map[string]any
	pj, _ := expr.FromJSON(params)
	pv = pj.(map[string]any)
	vars := expr.Vars{
		Params:       pv,
		Steps:        map[string]expr.StepVars{"list": {Output: expr.Output(`{"files": ["a.csv", "b.csv"]}`), Status: "succeeded"}},
		RunID:        "r1",
		ScheduledFor: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC),
		Trigger:      "manual",
		Job:          "etl",
		Namespace:    "data",
		Attempt:      2,
	}
	run, _, err := x.Step("list").Apply(r.Spec.Steps[0], vars)
	if err != nil || run.HTTP.URL != "https://files.example/list?region=us" {
		t.Errorf("list: %+v, %v", run.HTTP, err)
	}
	run, _, err = x.Step("count").Apply(r.Spec.Steps[1], vars)
	if err != nil || !reflect.DeepEqual(run.Command.Argv, []string{"/opt/etl/count", "a.csv", "--date=2026-11-28T09:00:00Z"}) || run.Command.Env["LIMIT"] != "10" {
		t.Errorf("count: %+v, %v", run.Command, err)
	}
	run, payload, err := x.Step("publish").Apply(r.Spec.Steps[2], vars)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"day":"2026-11-28T09:00:00Z","files":["a.csv","b.csv"],"n":1.5,"note":"try 2 of ${{ x }}"}`; string(payload) != want {
		t.Errorf("payload = %s\nwant      %s", payload, want)
	}
	if run.HTTP.Headers["X-Region"] != "us" || run.HTTP.Headers["Authorization"] != "secret://env/TOKEN" {
		t.Errorf("headers = %v", run.HTTP.Headers)
	}
	if r.Spec.Steps[2].Run.HTTP.Headers["X-Region"] != "${{ params.region }}" {
		t.Error("Apply changed the spec")
	}

	// A parent's output without the field: the attempt fails, naming it.
	vars.Steps["list"] = expr.StepVars{Output: expr.Output("not json"), Status: "succeeded"}
	_, _, err = x.Step("count").Apply(r.Spec.Steps[1], vars)
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.Field != "run.command.argv[1]" {
		t.Errorf("count with a text output: %v", err)
	}
}

func TestExpressionErrorsNameThePlace(t *testing.T) {
	tests := []struct{ name, old, new, want string }{
		{"unknown param", `${{ params.region }}"}}`, `${{ params.regoin }}"}}`,
			`p.yaml:12:64: spec.steps[0].run.http.url: ${{ params.regoin }}: no param "regoin" (declared: dry_run, limit, region)`},
		{"not an ancestor", `"${{ steps.list.output.files[0] }}"`, `"${{ steps.publish.output }}"`,
			`p.yaml:15:51: spec.steps[1].run.command.argv[1]: ${{ steps.publish.output }}: step "publish" is not an ancestor of this step`},
		{"type error", `LIMIT: "${{ params.limit }}"`, `LIMIT: "${{ params.limit + 'x' }}"`,
			`spec.steps[1].run.command.env.LIMIT: ${{ params.limit + 'x' }}: found no matching overload for '_+_' applied to '(int, string)'`},
		{"computed scheme", `"https://files.example/list?region=${{ params.region }}"`, `"${{ params.region }}"`,
			`spec.steps[0].run.http.url: a URL with expressions starts with http:// or https:// written out`},
		{"computed secret", `"secret://env/TOKEN"`, `"secret://env/${{ params.region }}"`,
			`spec.steps[2].run.http.headers.Authorization: a secret reference is written out in full, not computed by an expression`},
		{"unclosed", `"${{ params.limit }}"`, `"${{ params.limit "`,
			`p.yaml:15:120: spec.steps[1].run.command.env.LIMIT: ${{ without its closing }}`},
		{"old template beside", `"--date={{ .ScheduledFor }}"`, `"--date={{ .Nope }}${{ attempt }}"`,
			`spec.steps[1].run.command.argv[2]: {{ .Nope }} is not one of`},
		{"bad default", `default: 10}`, `default: ten}`, `spec.params.limit.default: "ten" is not an integer`},
		{"default outside enum", `default: eu,`, `default: fr,`, `spec.params.region.default: "fr" is not one of "eu", "us"`},
		{"bad type", `{type: boolean`, `{type: bool`, `spec.params.dry_run.type: "bool" is not one of string, number, integer, boolean, object, array`},
		{"bad name", `dry_run: {`, `Dry-Run: {`, `spec.params.Dry-Run: param name "Dry-Run" must be`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(pipeline, tt.old) {
				t.Fatalf("the pipeline has no %q", tt.old)
			}
			_, es := Decode("p.yaml", []byte(strings.Replace(pipeline, tt.old, tt.new, 1)))
			if len(es) == 0 || !strings.Contains(es.Error(), tt.want) {
				t.Errorf("got %v\nwant %s", es, tt.want)
			}
		})
	}
}

func TestRunParams(t *testing.T) {
	r := decodeOne(t, strings.Replace(pipeline, "limit:   {type: integer, default: 10}", "limit:   {type: integer}\n    ratio: {type: number, default: 0.5}\n    tags: {type: array, default: []}", 1))
	s := &r.Spec
	tests := []struct {
		given map[string]Payload
		want  string
	}{
		{map[string]Payload{"limit": Payload(`3`)}, `{"dry_run":false,"limit":3,"ratio":0.5,"region":"eu","tags":[]}`},
		{map[string]Payload{"limit": Payload(`3`), "ratio": Payload(`2`), "tags": Payload(`["a"]`), "region": Payload(`"us"`)}, `{"dry_run":false,"limit":3,"ratio":2,"region":"us","tags":["a"]}`},
		{map[string]Payload{}, `params.limit: is required: it has no default`},
		{map[string]Payload{"limit": Payload(`3.5`)}, `params.limit: 3.5 is not an integer`},
		{map[string]Payload{"limit": Payload(`3`), "region": Payload(`"fr"`)}, `params.region: "fr" is not one of "eu", "us"`},
		{map[string]Payload{"limit": Payload(`3`), "nope": Payload(`1`)}, `params.nope: no such param (declared: dry_run, limit, ratio, region, tags)`},
		{map[string]Payload{"limit": Payload(`3`), "dry_run": Payload(`"yes"`)}, `params.dry_run: "yes" is not a boolean`},
		{map[string]Payload{"limit": Payload(`3`), "tags": Payload(`{"a": 1}`)}, `params.tags: {"a": 1} is not an array`},
	}
	for _, tt := range tests {
		got, err := s.RunParams(tt.given)
		if err != nil {
			got = Payload(err.Error())
		}
		if string(got) != tt.want {
			t.Errorf("RunParams(%s) = %s, want %s", mustJSON(tt.given), got, tt.want)
		}
	}
	if got := s.RequiredParam(); got != "limit" {
		t.Errorf("RequiredParam() = %q", got)
	}
	for text, want := range map[string]string{"3": "3", "x": `"x" is not an integer`} {
		v, err := s.Params["limit"].ParamText(text)
		if err != nil {
			v = Payload(err.Error())
		}
		if string(v) != want {
			t.Errorf("ParamText(%q) = %s, want %s", text, v, want)
		}
	}
	if v, _ := s.Params["region"].ParamText("3"); string(v) != `"3"` {
		t.Errorf("a string param's text is %s", v)
	}
}

// TestComputedSecretRefused: a param's value cannot make a header a secret
// reference that the worker would resolve.
func TestComputedSecretRefused(t *testing.T) {
	r := decodeOne(t, strings.Replace(pipeline, `"secret://env/TOKEN"`, `"${{ params.region }}"`, 1))
	r.Spec.Params["region"] = Param{Type: expr.String}
	x, es := CompileExprs(&r.Spec)
	if len(es) > 0 {
		t.Fatal(es)
	}
	_, _, err := x.Step("publish").Apply(r.Spec.Steps[2], expr.Vars{
		Params: map[string]any{"region": "secret://env/DATABASE_PASSWORD"},
		Steps:  map[string]expr.StepVars{"list": {Output: []any{}}},
	})
	if err == nil || !strings.Contains(err.Error(), "may not be a secret reference") {
		t.Fatalf("Apply = %v", err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestHintsNameTheNewerForm(t *testing.T) {
	docs, es := Decode("old.yaml", []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: old}\nspec:\n  schedule: {cron: \"@daily\"}\n"+
		"  run: {command: {argv: [/bin/echo, \"--date={{ .ScheduledFor }}\", \"${{ attempt }}\", \"{{ .Step }}\"]}}\n"))
	if len(es) > 0 {
		t.Fatal(es)
	}
	hs := docs[0].Hints()
	if len(hs) != 1 || hs[0].Error() != "old.yaml:6:37: spec.steps[0].run.command.argv[1]: hint: {{ .ScheduledFor }} is the older form of ${{ run.scheduled_for }}" {
		t.Fatalf("hints: %v", hs)
	}
}

// TestReviewedEdges: inputs that a review found mishandled.
func TestReviewedEdges(t *testing.T) {
	// A field that holds only an escaped $${{ is text, not a panic.
	r := decodeOne(t, strings.Replace(pipeline, `note: "try ${{ attempt }} of $${{ x }}"`, `note: "$${{ x }}"`, 1))
	x, es := CompileExprs(&r.Spec)
	if len(es) > 0 {
		t.Fatal(es)
	}
	_, payload, err := x.Step("publish").Apply(r.Spec.Steps[2], expr.Vars{Params: map[string]any{"region": "eu"}, Steps: map[string]expr.StepVars{"list": {Output: map[string]any{"files": []any{}}}}})
	if err != nil || !strings.Contains(string(payload), `"note":"${{ x }}"`) {
		t.Errorf("escaped only: %s, %v", payload, err)
	}
	// A param named as a word of the language is refused.
	if _, es := Decode("p.yaml", []byte(strings.Replace(pipeline, "limit:   {type: integer", "in:   {type: integer", 1))); len(es) == 0 || !strings.Contains(es.Error(), `param name "in" is a word of the expression language`) {
		t.Errorf("param in: %v", es)
	}
	// An integer given as 3.0 is kept as 3.
	if got, err := r.Spec.RunParams(map[string]Payload{"limit": Payload("3.0")}); err != nil || !strings.Contains(string(got), `"limit":3,`) {
		t.Errorf("limit=3.0: %s, %v", got, err)
	}
	// Defaults past a run's params bound are refused at validation.
	big := strings.Repeat("x", MaxParamsBytes)
	if _, es := Decode("p.yaml", []byte(strings.Replace(pipeline, "default: eu,", "default: "+big+",", 1))); len(es) == 0 || !strings.Contains(es.Error(), "spec.params: the defaults are") {
		t.Errorf("big default: %.200v", es)
	}
}
