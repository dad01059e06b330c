package dag_test

import (
	"fmt"

	"github.com/orrery-dev/orrery/dag"
)

// A job file decodes into resources, defaults filled in; every problem is
// named by file, line, column and field, all at once.
func ExampleDecode() {
	docs, errs := dag.Decode("refund.yaml", []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: refund, namespace: shop}
spec:
  schedule:
    event: {type: refund.requested}
  steps:
    - name: refund-ok
      approval: {role: editor, timeout: 24h}
    - name: pay
      needs: [refund-ok]
      run: {http: {url: "https://pay.example/refund"}}
`))
	if len(errs) > 0 {
		panic(errs)
	}
	spec := docs[0].Resource.Spec
	fmt.Println(docs[0].Resource.Metadata.Name, "overlap:", spec.Overlap)
	for _, st := range spec.Steps {
		fmt.Println(st.Name, "parks:", st.Parks(), "needs:", st.Needs)
	}
	// Output:
	// refund overlap: allow
	// refund-ok parks: true needs: []
	// pay parks: false needs: [refund-ok]
}

// Mistakes come back together, each with its place, so an editor (or a CI
// check running `orrery validate`) can point at every one.
func ExampleDecode_errors() {
	_, errs := dag.Decode("bad.yaml", []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: Bad}
spec:
  schedule: {cron: "61 * * * *"}
  steps:
    - name: wait
      wait: {event: order.shipped}
`))
	for _, e := range errs {
		fmt.Println(e)
	}
	// Output:
	// bad.yaml:3:12: metadata.name: "Bad" must start with a lowercase letter or digit and hold only a-z, 0-9, '-', '_' and '.'
	// bad.yaml:5:14: spec.schedule.cron: minute field "61": end of range (61) above maximum (59): 61
	// bad.yaml:8:13: spec.steps[0].wait.timeout: name how long the step waits at most (timeout: 72h), 1s to 8784h (366 days)
}

// A job started by events filters them with an expression over the event;
// it is compiled once and asked of each event.
func ExampleCompileEventFilter() {
	f, err := dag.CompileEventFilter("${{ event.data.amount >= 100 }}")
	if err != nil {
		panic(err)
	}
	for _, amount := range []float64{150, 20} {
		ok, _ := f.Match(map[string]any{"type": "order.paid", "data": map[string]any{"amount": amount}})
		fmt.Println(amount, ok)
	}
	// Output:
	// 150 true
	// 20 false
}
