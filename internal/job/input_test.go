package job_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
)

// Zero or out-of-range instants, cron expressions that never fire, payloads
// nested too deep or holding integers past 2^53-1 are validation errors
// naming the field from Create, Update, Plan and ApplyAll (a zero at used
// to panic computing the first fire time), and nothing is written.
func TestHostileInputIsRejectedEverywhere(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	existing, err := svc.Create(ctx, job.Anonymous, resource("existing", "@daily"), "")
	if err != nil {
		t.Fatal(err)
	}
	before := counts(t, pool)
	tests := []struct {
		name  string
		edit  func(*dag.Resource)
		field string
		msg   string
	}{
		{"zero at", func(r *dag.Resource) { r.Spec.Schedule = schedule.Spec{At: "0001-01-01T00:00:00Z"} }, "spec.schedule.at", "is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z"},
		{"before 1970", func(r *dag.Resource) { r.Spec.Schedule = schedule.Spec{At: "1900-01-01T00:00:00Z"} }, "spec.schedule.at", "is outside"},
		{"past 9999", func(r *dag.Resource) { r.Spec.Schedule = schedule.Spec{At: "9999-12-31T23:59:59-00:01"} }, "spec.schedule.at", "is outside"},
		{"31 February", func(r *dag.Resource) { r.Spec.Schedule.Cron = schedule.Crons("0 0 31 2 *") }, "spec.schedule.cron", "never fires"},
		{"too rare", func(r *dag.Resource) { r.Spec.Schedule.Cron = schedule.Crons("0 0 29 2 */7") }, "spec.schedule.cron", "fires too rarely"},
		{"deep payload", func(r *dag.Resource) {
			r.Spec.Payload = dag.Payload(strings.Repeat("[", 5000) + strings.Repeat("]", 5000))
		}, "spec.steps[0].payload", "the limit is 64"},
		{"2^53+1", func(r *dag.Resource) { r.Spec.Payload = dag.Payload(`{"id": 9007199254740993}`) }, "spec.steps[0].payload", "number 9007199254740993 is beyond ±9007199254740991"},
	}
	for _, tt := range tests {
		check := func(call string, err error, prefix string) {
			t.Helper()
			var es dag.Errors
			if !errors.As(err, &es) || es[0].Field != prefix+tt.field || !strings.Contains(es[0].Message, tt.msg) {
				t.Errorf("%s %s: got %v, want an error on %s saying %q", call, tt.name, err, prefix+tt.field, tt.msg)
			}
		}
		r := resource("fresh", "@daily")
		tt.edit(&r)
		_, err := svc.Create(ctx, job.Anonymous, r, "key-"+tt.name)
		check("create", err, "")
		u := resource("existing", "@daily")
		tt.edit(&u)
		_, err = svc.Update(ctx, job.Anonymous, job.Ref{ID: existing.ID}, u, existing.Version)
		check("update", err, "")
		_, err = svc.Plan(ctx, job.Anonymous, []job.Item{{Resource: r}}, job.PlanOptions{})
		check("plan", err, "jobs[0].")
		_, err = svc.ApplyAll(ctx, job.Anonymous, []job.Item{{Resource: resource("ok", "@daily")}, {Resource: r}}, job.PlanOptions{})
		check("apply", err, "jobs[1].")
	}
	if after := counts(t, pool); after != before {
		t.Fatalf("rejected requests changed the database: %s -> %s", before, after)
	}
	// A job named without a namespace is reported as the lookup read it.
	if _, err := svc.Pause(ctx, job.Anonymous, job.Ref{Name: "missing"}); !errors.Is(err, job.ErrNotFound) || !strings.Contains(err.Error(), "default/missing") {
		t.Fatalf("pause missing: %v", err)
	}
}

// The bounds themselves and 29 February are accepted and fire.
func TestRareButRealSchedulesAreAccepted(t *testing.T) {
	t.Parallel()
	svc, _ := newService(t)
	ctx := context.Background()
	for name, spec := range map[string]schedule.Spec{
		"epoch":     {At: "1970-01-01T00:00:00Z"},
		"last":      {At: "9999-12-31T23:59:59Z"},
		"leap":      {Cron: schedule.Crons("0 0 29 2 *"), Timezone: "America/New_York"},
		"leap-or-m": {Cron: schedule.Crons("0 0 29 2 1")},
	} {
		r := resource(name, "@daily")
		r.Spec.Schedule = spec
		j, err := svc.Create(ctx, job.Anonymous, r, "")
		if err != nil || j.NextFireAt == nil {
			t.Fatalf("%s: %v %v", name, j, err)
		}
	}
}

// A definition larger than MaxDefinitionBytes (here 12 steps of 200 KB
// payloads, each within the payload limit) is refused whole, naming the
// limit, and nothing is written.
func TestDefinitionSizeIsCapped(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	before := counts(t, pool)
	res := resource("big", "@daily")
	res.Spec.Run, res.Spec.Payload = nil, nil
	big := dag.Payload(`"` + strings.Repeat("x", 200_000) + `"`)
	for i := range 12 {
		res.Spec.Steps = append(res.Spec.Steps, dag.Step{Name: "s" + string(rune('a'+i)), Run: dag.Executor{Handler: "h"}, Payload: big})
	}
	_, err := svc.Create(ctx, job.Anonymous, res, "")
	var inv *dag.FieldError
	if !errors.As(err, &inv) || inv.Field != "spec" || !strings.Contains(inv.Message, "MaxDefinitionBytes") {
		t.Fatalf("create of a %d-step 2.4 MB definition: %v", len(res.Spec.Steps), err)
	}
	if after := counts(t, pool); after != before {
		t.Fatalf("rows %v before, %v after", before, after)
	}
}
