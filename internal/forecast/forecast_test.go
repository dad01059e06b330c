package forecast

import (
	"fmt"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
)

func storm(n int, jitter *schedule.Duration) []Job {
	var jobs []Job
	for i := range n {
		r := dag.Resource{Metadata: dag.Metadata{Name: fmt.Sprintf("nightly-%03d", i)}, Spec: dag.JobSpec{
			Schedule: schedule.Spec{Cron: schedule.Crons("0 0 * * *"), Timezone: "Europe/Berlin", Jitter: jitter},
			Run:      &dag.Executor{Handler: "h"}, Defaults: dag.StepDefaults{Queue: "etl"}}}
		r.Normalize()
		jobs = append(jobs, Job{Namespace: r.Metadata.Namespace, Name: r.Metadata.Name, Spec: r.Spec})
	}
	hourly := dag.Resource{Metadata: dag.Metadata{Name: "hourly"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("0 * * * *")}, Run: &dag.Executor{Handler: "h"}}}
	hourly.Normalize()
	return append(jobs, Job{Namespace: "default", Name: "hourly", Spec: hourly.Spec})
}

// The midnight storm is the peak, named with its jobs; jitter spreads it
// over the minutes the firing will use (the same offsets), keeping every
// run.
func TestForecastFindsTheStormAndJitterSpreadsIt(t *testing.T) {
	from := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	to := from.Add(24 * time.Hour)
	res, err := Compute(storm(200, nil), from, to, 3)
	if err != nil {
		t.Fatal(err)
	}
	peak := res.Hottest[0]
	if res.Runs != 224 || peak.Runs != 201 || !peak.At.Equal(time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)) || peak.Tasks["etl"] != 200 || peak.Tasks["default"] != 1 {
		t.Fatalf("runs %d, peak %d at %s by queue %v; want 224 runs, 201 at 23:00Z (Berlin's midnight)", res.Runs, peak.Runs, peak.At, peak.Tasks)
	}
	if len(peak.Jobs) != jobsPerMinute || peak.Jobs[0].Runs != 1 {
		t.Errorf("the peak's jobs: %v", peak.Jobs)
	}
	spread, err := Compute(storm(200, schedule.D(10*time.Minute)), from, to, 3)
	if err != nil {
		t.Fatal(err)
	}
	if spread.Runs != 224 || spread.Peak() > 40 {
		t.Fatalf("with 10m of jitter: %d runs, peak %d; want 224, spread over ten minutes", spread.Runs, spread.Peak())
	}
	// The forecast's minutes are the firing's: each job's fire time.
	jobs := storm(3, schedule.D(10*time.Minute))
	s, _ := schedule.Parse(jobs[1].Spec.Schedule)
	s = s.For(jobs[1].Namespace, jobs[1].Name)
	fire := s.Fire(time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)).Truncate(time.Minute)
	one, err := Compute(jobs[1:2], from, to, 1)
	if err != nil || len(one.Minutes) != 1 || !one.Minutes[0].At.Equal(fire) {
		t.Fatalf("one jittered job: %+v, %v; want its minute %s", one.Minutes, err, fire)
	}
}

func TestForecastBounds(t *testing.T) {
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if _, err := Compute(nil, from, from.Add(8*24*time.Hour), 5); err == nil {
		t.Error("an 8-day window was accepted")
	}
	every := dag.Resource{Metadata: dag.Metadata{Name: "often"}, Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("* * * * * *")}, Run: &dag.Executor{Handler: "h"}}}
	every.Normalize()
	var jobs []Job
	for i := range 5 {
		jobs = append(jobs, Job{Namespace: "default", Name: fmt.Sprint(i), Spec: every.Spec})
	}
	if _, err := Compute(jobs, from, from.Add(7*24*time.Hour), 5); err == nil {
		t.Error("3 million runs were counted")
	}
}

// A forecast of one queue counts the jobs that have a step in it, and
// only those steps' tasks.
func TestForecastOfOneQueue(t *testing.T) {
	from := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	to := from.Add(24 * time.Hour)
	jobs := storm(200, nil)
	etl, err := Compute(InQueue(jobs, "etl"), from, to, 1)
	if err != nil {
		t.Fatal(err)
	}
	if etl.Runs != 200 || len(etl.Tasks) != 1 || etl.Tasks["etl"] != 200 || etl.Hottest[0].Runs != 200 {
		t.Fatalf("queue etl: %d runs, tasks %v; want the 200 storm jobs' runs and tasks only", etl.Runs, etl.Tasks)
	}
	def, err := Compute(InQueue(jobs, "default"), from, to, 1)
	if err != nil {
		t.Fatal(err)
	}
	if def.Runs != 24 || len(def.Tasks) != 1 || def.Tasks["default"] != 24 {
		t.Fatalf("queue default: %d runs, tasks %v; want 24, the hourly job's", def.Runs, def.Tasks)
	}
	if none := InQueue(jobs, "nowhere"); len(none) != 0 {
		t.Fatalf("%d jobs in a queue none names", len(none))
	}
	if whole := InQueue(jobs, ""); len(whole) != len(jobs) {
		t.Fatal("no queue keeps every job")
	}
}
