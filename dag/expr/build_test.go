package expr

import (
	"runtime"
	"sort"
	"strings"
	"testing"
)

// TestEveryFunctionIsSized: every overload the environment offers is
// either sized before it builds or has a reason it cannot outgrow its
// arguments; a new one (a cel-go upgrade, another extension) fails here
// until it is classified.
func TestEveryFunctionIsSized(t *testing.T) {
	e := testEnv(t)
	known := map[string]bool{}
	for id := range sized {
		known[id] = true
	}
	for _, ids := range unsized {
		for _, id := range ids {
			if known[id] {
				t.Errorf("%s is classified twice", id)
			}
			known[id] = true
		}
	}
	offered := map[string]bool{}
	var missing []string
	for name, f := range e.cel.Functions() {
		for _, o := range f.OverloadDecls() {
			offered[o.ID()] = true
			if !known[o.ID()] {
				missing = append(missing, name+" "+o.ID()+" -> "+o.ResultType().String())
			}
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("overload %s is neither sized nor unsized (dag/expr/build.go)", m)
	}
	for id := range known {
		if !offered[id] {
			t.Errorf("%s is classified but not offered", id)
		}
	}
}

// TestBuildIsSizedBeforeBuilt: expressions that would build gigabytes
// from a param at its bound (60,000 characters) or an output at its bound
// (64 KiB), or an item of a fan-out at 600 KB, fail naming the limit, and one evaluation allocates at most
// maxEvalAlloc, measured.
func TestBuildIsSizedBeforeBuilt(t *testing.T) {
	const maxEvalAlloc = 64 << 20
	e := testEnv(t)
	v := testVars()
	v.Params["region"] = strings.Repeat("a", 60_000)
	v.Params["days"] = []any{strings.Repeat("b", 60_000)}
	v.Steps["list"] = StepVars{Output: strings.Repeat("a", MaxOutputRead), Status: "succeeded"}
	v.Item = strings.Repeat("i", 600_000) // an item of a fan-out's list (at most MaxItemsJSON)
	p, o := "params.region", "steps.list.output"
	tests := []struct{ src, wantErr string }{
		{"size(" + o + `.replace("a", ` + o + `)) > 0`, "replace would build 4294967296 bytes"},
		{"size(" + p + `.replace("a", ` + p + `, 1000)) > 0`, "replace would build"},
		{"size(" + p + `.replace("", ` + p + `)) > 0`, "replace would build"},
		{"size(" + p + `.split("").map(c, ` + p + `).join("")) > 0`, "join would build"},
		{"size(" + p + `.split("a", 20).map(c, "").join(` + p + `)) > 0`, "join would build"},
		{"size(" + o + `.split("")) > 0`, ""}, // 65,536 items: within MaxBuildItems
		{"size(" + o + `.split("").map(c, ` + o + `.split(""))) > 0`, "cost limit"},
		{"size((" + o + " + " + o + `).split("")) > 0`, "split would build a list of 131072 items"},
		{"size(item + item) > 0", "+ would build 1200000 bytes"},
		{"size(bytes(item) + bytes(item)) > 0", "cost limit"}, // each conversion costs its 600,000 bytes
		// A dyn operand's + resolves its overload at run time: charged as built all the same.
		{"size(" + p + `.split("").map(c, ` + o + " + " + o + ")) > 0", "cost limit"},
		{"size(" + p + `.split("").map(c, string(` + o + "))) > 0", "cost limit"},
		// A match's work is its program times its input.
		{o + ".matches('[a-b]{1000}[a-c]{1000}[a-d]{1000}[a-e]{1000}x')", "matches would take about"},
		{"[1, 2, 3].all(x, " + o + ".matches('[a-b]{1000}x'))", "matches would take about"},
		{"[1, 2, 3, 4, 5, 6, 7, 8].all(x, !" + o + ".matches('b{100}'))", "cost limit"},
		{"size(" + p + `.split("").map(c, ` + p + " + " + p + ")) > 0", "cost limit"},
		{"size(" + p + `.split("").map(c, bytes(` + p + ") + bytes(" + p + "))) > 0", "cost limit"},
		{"size(strings.quote(" + p + `.replace("a", "\"\"\"\"\"\"\"\"\""))) > 0`, "strings.quote would build 1080002 bytes"},
		{"size(" + p + `.split("").map(c, ` + p + `.upperAscii())) > 0`, "cost limit"},
		{"size(" + p + `.split("").map(c, ` + p + `.reverse())) > 0`, "cost limit"},
		{"size(params.days.map(d, d + d).join(" + p + ")) > 0", ""},
		{"size(" + p + `.split("").map(c, params.days + params.days + params.days).map(l, l.join("-"))) > 0`, "cost limit"},
		{"'x'.matches('" + strings.Repeat("a{1000}", 50) + "')", "instructions"},
		{"'x'.matches('(a{1000}){1000}')", "invalid repeat count"},
		{"matches('x', " + p + `.substring(0, 30000).replace("a", "a{1000}", 100))`, "instructions"},
		{"matches('x', " + p + ")", "pattern is 60000 bytes"},
		{"[" + strings.Repeat(p+",", 200) + p + "].join(" + p + ")", "join would build"},
	}
	for _, tt := range tests {
		prg, err := e.Compile(tt.src, ancestors)
		if err != nil {
			if tt.wantErr != "" && strings.Contains(err.Error(), tt.wantErr) {
				continue // refused before it runs (its constant folded)
			}
			t.Errorf("Compile(%.60q): %v", tt.src, err)
			continue
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err = prg.Eval(e.Activation(v))
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("Eval(%.60q): %v", tt.src, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("Eval(%.60q) = %v, want an error with %q", tt.src, err, tt.wantErr)
		case err != nil && !strings.Contains(err.Error(), "${{"):
			t.Errorf("Eval(%.60q) = %v: the error does not name the expression", tt.src, err)
		}
		if alloc > maxEvalAlloc {
			t.Errorf("Eval(%.60q) allocated %d MiB; the bound is %d MiB", tt.src, alloc>>20, maxEvalAlloc>>20)
		}
		t.Logf("%.60q: %d KiB allocated: %.120v", tt.src, alloc>>10, err)
	}
}
