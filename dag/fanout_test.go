package dag

import (
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/dag/expr"
)

const fanOut = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: fan, namespace: data}
spec:
  schedule: {cron: "0 9 * * *"}
  params:
    names: {type: array, default: [a, b]}
  steps:
    - name: list
      run: {handler: list}
    - name: load
      needs: [list]
      for_each: ${{ steps.list.output.files }}
      max_parallel: 5
      min_success: "90%"
      run: {handler: load}
      payload: {file: "${{ item }}", n: "${{ item_index }}"}
    - name: report
      needs: [load]
      run: {handler: report}
      payload: {all: "${{ steps.load.outputs }}", status: "${{ steps.load.status }}"}
`

func TestFanOutDecodes(t *testing.T) {
	r := decodeOne(t, fanOut)
	st := r.Spec.Steps[1]
	if st.ForEach != "${{ steps.list.output.files }}" || st.MaxParallel != 5 || st.MinSuccess != "90%" {
		t.Fatalf("load decoded as %+v", st)
	}
	x, es := CompileExprs(&r.Spec)
	if len(es) > 0 {
		t.Fatal(es)
	}
	if !x.Step("load").FansOut() || x.Step("report").FansOut() {
		t.Error("FansOut: load should, report should not")
	}
	if got := x.Step("load").ForEachReads.Steps; len(got) != 1 || got[0] != "list" {
		t.Errorf("for_each reads %v", got)
	}
	for _, tt := range []struct {
		min         MinSuccess
		total, need int
	}{{"", 7, 7}, {"90%", 10, 9}, {"90%", 7, 7}, {"50%", 3, 2}, {"3", 10, 3}, {"30", 10, 10}, {"100%", 1, 1}} {
		if got := tt.min.Need(tt.total); got != tt.need {
			t.Errorf("MinSuccess(%q).Need(%d) = %d, want %d", tt.min, tt.total, got, tt.need)
		}
	}
	if s, i, ok := StepOfItem(ItemStep("load", 12)); s != "load" || i != 12 || !ok {
		t.Errorf("StepOfItem(load[12]) = %s %d %v", s, i, ok)
	}
	for _, name := range []string{"load", "load[]", "load[x]", "[1]", "load[-1]"} {
		if _, _, ok := StepOfItem(name); ok {
			t.Errorf("StepOfItem(%q) is an item", name)
		}
	}
}

func TestFanOutErrorsNameTheField(t *testing.T) {
	tests := []struct{ name, old, new, want string }{
		{"not a list", `for_each: ${{ steps.list.output.files }}`, `for_each: ${{ 'a' + 'b' }}`,
			`spec.steps[1].for_each: ${{ 'a' + 'b' }}: for_each is a list; this is a string`},
		{"not whole", `for_each: ${{ steps.list.output.files }}`, `for_each: x${{ steps.list.output.files }}`,
			`spec.steps[1].for_each: for_each is one ${{ EXPR }} of a list and nothing else`},
		{"reads its items", `for_each: ${{ steps.list.output.files }}`, `for_each: ${{ [item] }}`,
			`spec.steps[1].for_each: for_each makes the items: it cannot read item or item_index`},
		{"not an ancestor", `for_each: ${{ steps.list.output.files }}`, `for_each: ${{ steps.report.output }}`,
			`step "report" is not an ancestor of this step`},
		{"item outside a fan-out", `{all: "${{ steps.load.outputs }}"`, `{all: "${{ item }}"`,
			`spec.steps[2].payload.all: item and item_index are read only by a step with for_each`},
		{"output of a fan-out", `{all: "${{ steps.load.outputs }}"`, `{all: "${{ steps.load.output }}"`,
			`step "load" fans out (for_each): read steps.load.outputs, the list of its items' outputs`},
		{"outputs of a step", `{file: "${{ item }}"`, `{file: "${{ steps.list.outputs }}"`,
			`step "list" does not fan out: read steps.list.output`},
		{"condition reads item", `      max_parallel: 5`, `      max_parallel: 5` + "\n" + `      when: ${{ item_index > 0 }}`,
			`spec.steps[1].when: a condition is decided once for the step, before its items exist`},
		{"max_parallel bound", `max_parallel: 5`, `max_parallel: 10001`, `spec.steps[1].max_parallel: 10001 is outside 1..10000 (or 0: no bound)`},
		{"min_success percent", `min_success: "90%"`, `min_success: "190%"`, `spec.steps[1].min_success: "190%": a percentage is 1%..100%`},
		{"min_success count", `min_success: "90%"`, `min_success: 0`, `spec.steps[1].min_success: "0": a count is 1..10000`},
		{"min_success text", `min_success: "90%"`, `min_success: most`, `spec.steps[1].min_success: "most" is not a count (19) or a percentage ("95%")`},
		{"min_success a list", `min_success: "90%"`, `min_success: [1]`, `min_success is a count (19) or a percentage`},
		{"max_parallel without for_each", `    - name: report` + "\n", `    - name: report` + "\n" + `      max_parallel: 2` + "\n",
			`spec.steps[2].max_parallel: applies only with for_each`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(fanOut, tt.old) {
				t.Fatalf("the job has no %q", tt.old)
			}
			_, es := Decode("f.yaml", []byte(strings.Replace(fanOut, tt.old, tt.new, 1)))
			if len(es) == 0 || !strings.Contains(es.Error(), tt.want) {
				t.Errorf("got %v\nwant %s", es, tt.want)
			}
		})
	}
}

// TestItemsRefuseNUL: an element holding a NUL character (which jsonb
// does not store) fails the list, naming the item, rather than the
// transaction that would write it.
func TestItemsRefuseNUL(t *testing.T) {
	r := decodeOne(t, strings.Replace(fanOut, `for_each: ${{ steps.list.output.files }}`, `for_each: ${{ ['ok', 'a\u0000b'] }}`, 1))
	x, es := CompileExprs(&r.Spec)
	if len(es) > 0 {
		t.Fatal(es)
	}
	_, err := x.Step("load").Items(expr.Vars{}, MaxItems)
	if err == nil || !strings.Contains(err.Error(), "for_each: item 1 holds a NUL character") {
		t.Fatalf("Items = %v", err)
	}
	items, err := x.Step("load").Items(expr.Vars{}, 1)
	if err == nil || !strings.Contains(err.Error(), "the list has 2 items; the limit is 1") {
		t.Fatalf("Items over the bound = %v, %v", items, err)
	}
}
