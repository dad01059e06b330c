package expr

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Template
		wantErr string
	}{
		{in: "plain", want: Template{{Text: "plain"}}},
		{in: "${{ params.a }}", want: Template{{Expr: true, Source: "params.a", Offset: 4}}},
		{in: "a ${{x}} b", want: Template{{Text: "a "}, {Expr: true, Source: "x", Offset: 5}, {Text: " b"}}},
		{in: "$${{ literal }}", want: Template{{Text: "${{ literal }}"}}},
		{in: `${{ "}}" + 'a}}' }}`, want: Template{{Expr: true, Source: `"}}" + 'a}}'`, Offset: 4}}},
		{in: `${{ "a\"}}" }}`, want: Template{{Expr: true, Source: `"a\"}}"`, Offset: 4}}},
		{in: "x ${{ a", wantErr: "${{ without its closing }}"},
		{in: "${{  }}", wantErr: "an empty ${{ }}"},
		{in: "}} {{ .Job }}", want: Template{{Text: "}} {{ .Job }}"}}},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Parse(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %#v, %v; want %#v", tt.in, got, err, tt.want)
		}
	}
}

func testEnv(t *testing.T) *Env {
	t.Helper()
	e, err := NewEnv(map[string]Type{
		"region": String, "dry_run": Boolean, "n": Integer, "ratio": Number, "cfg": Object, "days": Array,
	}, []string{"list", "load-files", "count", "later"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var ancestors = map[string]bool{"list": true, "load-files": true, "count": true}

func TestCompileErrors(t *testing.T) {
	e := testEnv(t)
	tests := []struct {
		src, wantMsg string
		wantOffset   int
	}{
		{"params.nope", `no param "nope" (declared: cfg, days, dry_run, n, ratio, region)`, 0},
		{"params", "params is read one at a time: params.NAME", 0},
		{"steps", "steps is read one at a time: steps.NAME.output (or steps['NAME'])", 0},
		{"steps.later.output", `step "later" is not an ancestor of this step: it may not have run (add it to needs, here or above)`, 0},
		{"steps.nope.output", `no step "nope" in this job`, 0},
		{"steps[params.region].output", "steps is indexed by a step's name written out: steps['NAME']", 0},
		{"params.region + 1", "found no matching overload for '_+_' applied to '(string, int)'", 14},
		{"1 +", "Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}", 3},
		{"nope", "undeclared reference to 'nope'", 0},
		{"run.nope", "undeclared reference to 'run'", 0},
		{strings.Repeat("1+", 3000) + "1", "is 6001 bytes; the limit is 4096", 0},
	}
	for _, tt := range tests {
		_, err := e.Compile(tt.src, ancestors)
		var xe *Error
		if !errors.As(err, &xe) {
			t.Errorf("Compile(%.30q) = %v, want an *Error", tt.src, err)
			continue
		}
		if xe.Message != tt.wantMsg || xe.Offset != tt.wantOffset {
			t.Errorf("Compile(%.30q) = %q at %d, want %q at %d", tt.src, xe.Message, xe.Offset, tt.wantMsg, tt.wantOffset)
		}
	}
}

func TestCompileTemplateOffsets(t *testing.T) {
	e := testEnv(t)
	tmpl, err := Parse("https://x/${{ params.region }}/${{  params.nope }}")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = e.CompileTemplate(tmpl, ancestors)
	var xe *Error
	if !errors.As(err, &xe) || xe.Offset != len("https://x/${{ params.region }}/${{  ") {
		t.Fatalf("CompileTemplate: %v (offset %d)", err, xe.Offset)
	}
}

func testVars() Vars {
	return Vars{
		Params: map[string]any{"region": "eu", "dry_run": false, "n": int64(3), "ratio": int64(2),
			"cfg": map[string]any{"k": "v"}, "days": []any{"mon", "tue"}},
		Steps: map[string]StepVars{
			"list":       {Output: Output(`{"files": ["a.csv", "b.csv"], "changed": true, "size": 2.5}`), Status: "succeeded"},
			"load-files": {Output: Output("line one\nnot json"), Status: "succeeded"},
			"count":      {Output: Output("progress...\n{\"rows\": 12}\n"), Status: "succeeded"},
		},
		RunID:        "11111111-2222-3333-4444-555555555555",
		ScheduledFor: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC),
		Trigger:      "manual",
		Job:          "etl",
		Namespace:    "data",
		Attempt:      2,
	}
}

func TestEvalEveryVariable(t *testing.T) {
	e := testEnv(t)
	a := e.Activation(testVars())
	tests := []struct {
		src  string
		want any
	}{
		{"params.region", "eu"},
		{"params.dry_run", false},
		{"params.n + 1", int64(4)},
		{"params.ratio * 1.5", 3.0}, // a number param given 2 is 2.0
		{"params.cfg.k", "v"},
		{"params.days[1]", "tue"},
		{"steps.list.output.files", []any{"a.csv", "b.csv"}},
		{"steps.list.output.files[0]", "a.csv"},
		{"steps.list.output.changed && !params.dry_run", true},
		{"steps.list.output.size > 2", true}, // double against int
		{"steps['load-files'].output", "line one\nnot json"},
		{"steps.count.output.rows", int64(12)}, // the last line's JSON
		{"steps.list.status", "succeeded"},
		{"run.id", "11111111-2222-3333-4444-555555555555"},
		{"run.scheduled_for", "2026-11-28T09:00:00Z"},
		{"string(run.scheduled_for)", "2026-11-28T09:00:00Z"},
		{"run.scheduled_for.getHours()", int64(9)},
		{"run.trigger", "manual"},
		{"job.name + '/' + job.namespace", "etl/data"},
		{"attempt", int64(2)},
		{"{'n': params.n, 'files': steps.list.output.files.map(f, f.upperAscii())}", map[string]any{"n": int64(3), "files": []any{"A.CSV", "B.CSV"}}},
		{"'a,b'.split(',')", []any{"a", "b"}},
		{"null", nil},
	}
	for _, tt := range tests {
		p, err := e.Compile(tt.src, ancestors)
		if err != nil {
			t.Errorf("Compile(%q): %v", tt.src, err)
			continue
		}
		got, err := p.Eval(a)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Eval(%q) = %#v, %v; want %#v", tt.src, got, err, tt.want)
		}
	}
}

func TestReads(t *testing.T) {
	e := testEnv(t)
	tmpl, _ := Parse("${{ steps.list.output }} ${{ steps['count'].status + params.region }} ${{ steps.list.status }}")
	_, reads, err := e.CompileTemplate(tmpl, ancestors)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Reads{Params: true, Steps: []string{"count", "list"}, Outputs: []string{"list"}}); !reflect.DeepEqual(reads, want) {
		t.Errorf("reads = %+v, want %+v", reads, want)
	}
	tmpl, _ = Parse("${{ attempt }}")
	if _, reads, _ = e.CompileTemplate(tmpl, ancestors); reads.Params || len(reads.Steps) > 0 {
		t.Errorf("reads of attempt = %+v, want none", reads)
	}
}

func TestRender(t *testing.T) {
	e := testEnv(t)
	a := e.Activation(testVars())
	tests := []struct {
		in   string
		want any
	}{
		{"${{ steps.list.output.files }}", []any{"a.csv", "b.csv"}}, // whole: keeps the type
		{"files=${{ steps.list.output.files }}", `files=["a.csv","b.csv"]`},
		{"--date=${{ run.scheduled_for }} n=${{ params.n }} ok=${{ true }} none=${{ null }}.", "--date=2026-11-28T09:00:00Z n=3 ok=true none=."},
		{"${{ params.region }}", "eu"},
		{"no expression", "no expression"},
	}
	for _, tt := range tests {
		tmpl, err := Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		progs, _, err := e.CompileTemplate(tmpl, ancestors)
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		got, err := Render(tmpl, progs, a)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Render(%q) = %#v, %v; want %#v", tt.in, got, err, tt.want)
		}
	}
}

// TestHostileExpressions: what a job author can write is bounded in CPU
// and memory, and fails with an error that says so.
func TestHostileExpressions(t *testing.T) {
	e := testEnv(t)
	tests := []struct{ src, wantErr string }{
		{"[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10].map(f, [1,2,3,4,5,6,7,8,9,10].map(g, a*b*c*d*f*g))))))", "cost limit"},
		{"'" + strings.Repeat("x", 4000) + "'.replace('x', '" + strings.Repeat("y", 40) + "').replace('y', '" + strings.Repeat("z", 40) + "')", "limit"},
		{"[" + strings.Repeat("'"+strings.Repeat("x", 100)+"',", 30) + "'x'].map(s, [" + strings.Repeat("s,", 30) + "s])", "larger than"},
		{"1 / (params.n - 3)", "division by zero"},
		{"steps.list.output.nope", "no such key: nope"},
		{"params.days[5]", "index out of bounds"},
	}
	for _, tt := range tests {
		p, err := e.Compile(tt.src, ancestors)
		if err != nil {
			if strings.Contains(err.Error(), tt.wantErr) {
				continue // refused before it runs
			}
			t.Errorf("Compile(%.40q): %v", tt.src, err)
			continue
		}
		start := time.Now()
		_, err = p.Eval(e.Activation(testVars()))
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Eval(%.40q) = %v, want an error with %q", tt.src, err, tt.wantErr)
		}
		t.Logf("%.40q: %v in %v", tt.src, err, time.Since(start))
	}
}

func TestOutput(t *testing.T) {
	tests := []struct {
		in   string
		want any
	}{
		{`{"a": 1}`, map[string]any{"a": int64(1)}},
		{"[1, 2.5]", []any{int64(1), 2.5}},
		{"42\n", int64(42)},
		{"plain text", "plain text"},
		{"log line\n{\"done\": true}\n", map[string]any{"done": true}},
		{"log line\n42", "log line\n42"}, // a last line that is a bare number stays text
		{"", ""},
		{"18446744073709551616", 18446744073709551616.0},
	}
	for _, tt := range tests {
		if got := Output(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Output(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}

// TestCostIsSharedByAStep: the expressions evaluated with one Activation
// (one attempt's) share one cost limit.
func TestCostIsSharedByAStep(t *testing.T) {
	e := testEnv(t)
	ten := "[1,2,3,4,5,6,7,8,9,10]"
	heavy := ten + ".map(a, " + ten + ".map(b, " + ten + ".map(c, " + ten + ".map(d, a*b*c*d)))).size()" // about 10^4 of work
	p, err := e.Compile(heavy, ancestors)
	if err != nil {
		t.Fatal(err)
	}
	a := e.Activation(testVars())
	n := 0
	for ; n < 1000; n++ {
		if _, err = p.Eval(a); err != nil {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "together reached the cost limit") {
		t.Fatalf("after %d evaluations: %v, want the shared limit reached", n, err)
	}
	if n < 5 || n > 100 {
		t.Errorf("%d evaluations before the limit; want a handful", n)
	}
	if _, err := p.Eval(e.Activation(testVars())); err != nil {
		t.Errorf("a fresh activation: %v", err)
	}
}

func TestConditions(t *testing.T) {
	e := testEnv(t)
	a := e.Activation(testVars())
	for src, want := range map[string]string{
		"!params.dry_run && steps.list.output.changed": "true",
		"params.n > 5":                "false",
		"steps.list.output.files":     "a condition is a bool; this was [\"a.csv\",\"b.csv\"]",
		"steps.list.output.files[0]":  "a condition is a bool; this was \"a.csv\"",
		"params.region":               "compile: a condition is a bool; this is a string",
		"steps.list.output.nope == 1": "no such key: nope",
	} {
		p, err := e.CompileCondition(src, ancestors)
		if err != nil {
			var xe *Error
			if errors.As(err, &xe) && "compile: "+xe.Message == want {
				continue
			}
			t.Errorf("CompileCondition(%q): %v", src, err)
			continue
		}
		got, err := p.Condition(a)
		g := strconv.FormatBool(got)
		if err != nil {
			g = err.(*Error).Message
		}
		if g != want {
			t.Errorf("Condition(%q) = %s, want %s", src, g, want)
		}
	}
}

func TestTruncatedOutputIsNotRead(t *testing.T) {
	e := testEnv(t)
	v := testVars()
	v.Steps["list"] = StepVars{Output: "partial...", Status: "succeeded", Truncated: true}
	a := e.Activation(v)
	for src, wantErr := range map[string]string{
		"steps.list.output":              "the output of step list was cut (it passed 65536 bytes): an expression does not read part of an output",
		"size(steps['list'].output) > 0": "the output of step list was cut",
		"steps.list.status":              "",
		"steps['list']['status']":        "",
	} {
		p, err := e.Compile(src, ancestors)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		_, err = p.Eval(a)
		if wantErr == "" && err != nil || wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("Eval(%s) = %v, want %q", src, err, wantErr)
		}
	}
}

// TestCompiledOnceCheckedEachTime: an expression compiled for one step is
// taken from the cache for another, and what that step may read is still
// checked (and what it reads still reported).
func TestCompiledOnceCheckedEachTime(t *testing.T) {
	e := testEnv(t)
	src := "steps.later.output.x + params.region"
	p, err := e.Compile(src, map[string]bool{"later": true})
	if err != nil || !p.Reads.Params || len(p.Reads.Outputs) != 1 {
		t.Fatalf("first compile: %v, %+v", err, p)
	}
	if _, err := e.Compile(src, ancestors); err == nil || !strings.Contains(err.Error(), `step "later" is not an ancestor`) {
		t.Fatalf("second compile, for a step below which later is not: %v", err)
	}
	p, err = e.Compile(src, map[string]bool{"later": true})
	if err != nil || !p.Reads.Params || len(p.Reads.Outputs) != 1 {
		t.Fatalf("third compile: %v, %+v", err, p)
	}
}

// TestRefusedForms: what the cost model does not bound, and a leading dot
// that names the same variables, are checked like the rest.
func TestRefusedForms(t *testing.T) {
	e := testEnv(t)
	for src, want := range map[string]string{
		`"%s".format([params.region])`: "format is not available",
		`.steps.later.output`:          `step "later" is not an ancestor`,
		`.steps['later'].status`:       `step "later" is not an ancestor`,
		`.params.nope`:                 `no param "nope"`,
		`.params`:                      "params is read one at a time",
	} {
		if _, err := e.Compile(src, ancestors); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%s) = %v, want %q", src, err, want)
		}
	}
}
