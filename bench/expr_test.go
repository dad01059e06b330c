package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/expr"
)

// BenchmarkExpressions: what evaluating a step's expressions costs a
// worker when its attempt starts (dag.StepExprs.Apply): the storm's
// payload of five expressions (ORRERY_BENCH_EXPRS), and one expression
// that runs into the cost limit, the most a hostile job author can make
// one attempt spend.
func BenchmarkExpressions(b *testing.B) {
	vars := expr.Vars{Params: map[string]any{"region": "eu"}, RunID: "01a21f9f-ffca-72e4-a9a0-91d847f0d432",
		ScheduledFor: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Trigger: "schedule", Job: "storm-00001", Namespace: "default", Attempt: 1}
	ten := "[" + strings.TrimSuffix(strings.Repeat("1,", 10), ",") + "]"
	heavy := "${{ " + ten + ".map(a, " + ten + ".map(b, " + ten + ".map(c, " + ten + ".map(d, " + ten + ".map(e, " + ten + ".map(f, a*b*c*d*e*f)))))) }}"
	for _, c := range []struct {
		name    string
		spec    dag.JobSpec
		wantErr bool
	}{
		{"storm payload", exprSpec("@daily", true), false},
		{"at the cost limit", func() dag.JobSpec {
			s := noopSpec("@daily")
			s.Steps[0].Payload = dag.Payload(`{"x": "` + heavy + `"}`)
			return s
		}(), true},
	} {
		b.Run(c.name, func(b *testing.B) {
			x, es := dag.CompileExprs(&c.spec)
			if len(es) > 0 {
				b.Fatal(es)
			}
			step := x.Step(c.spec.Steps[0].Name)
			for b.Loop() {
				_, _, err := step.Apply(c.spec.Steps[0], vars)
				if (err != nil) != c.wantErr {
					b.Fatal(err)
				}
			}
		})
	}
}
