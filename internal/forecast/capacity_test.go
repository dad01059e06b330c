package forecast

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/dag/schedule"
)

func capJob(t *testing.T, name, cron string, steps []dag.Step, lengths map[string]time.Duration) Job {
	t.Helper()
	r := dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons(cron)}, Steps: steps}}
	r.Normalize()
	if es := dag.Validate(&r); len(es) > 0 {
		t.Fatal(es)
	}
	return Job{Namespace: r.Metadata.Namespace, Name: r.Metadata.Name, Spec: r.Spec, Lengths: lengths,
		Profiles: map[string]resources.Vector{"trainer": {CPU: 8000, Memory: 32 << 30}}}
}

// Demand by queue and hour: each step's resources for its median length,
// starting when the steps it needs have ended; the hours past what the
// queue's workers have are named, with the jobs that make them.
func TestCapacityForecastNamesTheShortHours(t *testing.T) {
	h := func(s string) dag.Executor { return dag.Executor{Handler: s} }
	res := func(cpu, mem string) *dag.Resources {
		return &dag.Resources{CPU: dag.Quantity(cpu), Memory: dag.Quantity(mem)}
	}
	jobs := []Job{
		capJob(t, "nightly-train", "0 0 * * *", []dag.Step{
			{Name: "prep", Run: h("h"), Queue: "etl", Resources: res("4", "")},
			{Name: "train", Needs: []string{"prep"}, Run: h("h"), Queue: "etl", ResourceProfile: "trainer"},
			{Name: "report", Needs: []string{"train"}, Run: h("h"), Queue: "etl", Resources: res("1", "")}, // never ran: a minute
		}, map[string]time.Duration{"prep": 30 * time.Minute, "train": 2 * time.Hour}),
		capJob(t, "reports", "0 * * * *", []dag.Step{{Name: "r", Run: h("h"), Queue: "etl", Resources: res("20", "1Gi")}},
			map[string]time.Duration{"r": 30 * time.Minute}),
		capJob(t, "render", "0 0 * * *", []dag.Step{{Name: "g", Run: h("h"), Queue: "gpu", Resources: &dag.Resources{GPU: "1"}}},
			map[string]time.Duration{"g": time.Hour}),
		capJob(t, "elastic", "0 0 * * *", []dag.Step{{Name: "e", Run: h("h"), Queue: "any", Resources: res("100", "")}}, nil),
	}
	fleet := map[string]QueueCapacity{"etl": {Capacity: resources.Vector{CPU: 16000, Memory: 64 << 30}}, "any": {Unbounded: true}}
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	hours, unmeasured, err := Capacity(jobs, from, from.Add(4*time.Hour), fleet)
	if err != nil {
		t.Fatal(err)
	}
	if unmeasured != 2 { // report, elastic's e
		t.Errorf("unmeasured %d, want 2", unmeasured)
	}
	got := map[string]string{}
	for _, h := range hours {
		line := fmt.Sprintf("%s short %v", h.Demand, h.Short)
		if len(h.Jobs) > 0 {
			line += fmt.Sprintf(" jobs %s=%s", h.Jobs[0].Job, h.Jobs[0].Demand)
			for _, j := range h.Jobs[1:] {
				line += fmt.Sprintf(",%s=%s", j.Job, j.Demand)
			}
		}
		got[h.Queue+" "+h.At.Format("15")] = line
	}
	want := map[string]string{
		// prep 4 for half the hour, train 8 for the other half, reports 20 for half.
		"etl 00": "cpu 16, memory 16896Mi short []",
		"etl 01": "cpu 18, memory 33280Mi short [cpu] jobs default/reports=cpu 10,default/nightly-train=cpu 8",
		// train until 02:30, report a minute (17m), reports.
		"etl 02": "cpu 14017m, memory 16896Mi short []",
		"etl 03": "cpu 10, memory 512Mi short []",
		"gpu 00": "gpu 1 short [gpu] jobs default/render=gpu 1",
		"any 00": "cpu 1667m short []", // a minute of 100 cores, unbounded
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d queue-hours %v, want %d", len(got), got, len(want))
	}
}

// A forecast whose runs would hold steps for more step-hours than the
// bound is refused before it adds any up, naming the field.
func TestCapacityForecastIsBounded(t *testing.T) {
	var steps []dag.Step
	for i := range 10 {
		steps = append(steps, dag.Step{Name: fmt.Sprintf("s%d", i), Run: dag.Executor{Handler: "h"}, Resources: &dag.Resources{CPU: "1"}})
	}
	var jobs []Job
	for k := range 3 {
		jobs = append(jobs, capJob(t, fmt.Sprintf("every-second-%d", k), "* * * * * *", steps, nil))
	}
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	_, _, err := Capacity(jobs, from, from.Add(7*24*time.Hour), nil)
	if err == nil || !strings.Contains(err.Error(), "to: the runs in the window hold steps for more than 5000000 step-hours together") {
		t.Fatalf("err %v", err)
	}
}
