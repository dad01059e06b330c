package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/lifecycle"
)

// Every schedule field, across New York's spring-forward (2027-03-14) and
// fall-back (2027-11-07) days: the scheduler's firing (planJob, pass after
// pass, each at the fire time it set, or a little late) fires the instants
// and at the fire times that preview (schedule.Plan) shows, and skips the
// excluded ones.
func TestFiringAgreesWithPreviewAcrossDST(t *testing.T) {
	jitter := schedule.D(20 * time.Minute)
	for _, c := range []struct {
		name string
		spec schedule.Spec
		from string
	}{
		{"cron list", schedule.Spec{Cron: schedule.Crons("30 2 * * *", "0 1,3 * * *")}, "2027-03-12T00:00:00Z"},
		{"cron list in the fold", schedule.Spec{Cron: schedule.Crons("30 1 * * *", "*/30 1 * * *")}, "2027-11-05T00:00:00Z"},
		{"start and end", schedule.Spec{Cron: schedule.Crons("30 2 * * *"), Start: "2027-03-13T12:00:00Z", End: "2027-03-16T07:00:00Z"}, "2027-03-10T00:00:00Z"},
		{"jitter", schedule.Spec{Cron: schedule.Crons("0 * * * *"), Jitter: jitter}, "2027-03-13T22:00:00Z"},
		{"jitter in the fold", schedule.Spec{Cron: schedule.Crons("0 * * * *"), Jitter: jitter}, "2027-11-06T22:00:00Z"},
		{"excluded date", schedule.Spec{Cron: schedule.Crons("30 2 * * *"), Exclude: &schedule.Exclude{Dates: []string{"2027-03-14"}}}, "2027-03-11T00:00:00Z"},
		{"excluded window", schedule.Spec{Cron: schedule.Crons("*/15 * * * *"), Exclude: &schedule.Exclude{Cron: []string{"* 1-2 * * *"}}}, "2027-11-07T03:00:00Z"},
		{"catchup window", schedule.Spec{Cron: schedule.Crons("30 2 * * *"), CatchupWindow: schedule.D(time.Hour)}, "2027-03-12T00:00:00Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.spec.Timezone = "America/New_York"
			s, err := schedule.Validate(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			s = s.For("default", "dst")
			from := at(c.from)
			var want []string
			for _, p := range s.Plan(from, 40) {
				if p.Excluded == "" {
					want = append(want, p.Instant.Format(time.RFC3339)+"@"+p.Fire.Format(time.RFC3339))
				}
			}
			for _, lateBy := range []time.Duration{0, 700 * time.Millisecond} {
				spec := dag.JobSpec{Schedule: c.spec, Misfire: dag.MisfireFireOnce, Overlap: dag.OverlapAllow}
				next, ok := s.Next(from)
				if !ok {
					t.Fatal("no first instant")
				}
				pending := s.Fire(next) // as a new job's first fire time
				var got []string
				for len(got) < len(want) {
					now := pending.Add(lateBy)
					p := planJob(s, &spec, pending, now, nil, time.Minute)
					for _, r := range p.Runs {
						if r.Status != lifecycle.RunPending {
							t.Fatalf("%s fired as %s (%s)", r.At, r.Status, r.Reason)
						}
						got = append(got, r.At.Format(time.RFC3339)+"@"+pending.Format(time.RFC3339))
					}
					if p.Done {
						break
					}
					pending = p.Next
				}
				if strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("late by %s: fired\n%s\npreview\n%s", lateBy, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
			if c.spec.Jitter != nil {
				jittered := 0
				for _, w := range want {
					if i := strings.Index(w, "@"); w[:i] != w[i+1:] {
						jittered++
					}
				}
				if jittered == 0 {
					t.Fatal("no instant fired later than itself: the jitter case tests nothing")
				}
			}
			if len(want) < 3 {
				t.Fatalf("preview shows %d instants: the case does not reach the DST change", len(want))
			}
		})
	}
}

// catchup_window: a job late by less than its window fires on time; one
// later goes to its misfire policy, whatever the process-wide default.
func TestCatchupWindowDecidesLateness(t *testing.T) {
	for _, c := range []struct {
		window  time.Duration
		late    time.Duration
		trigger lifecycle.Trigger
		runs    int
	}{
		{time.Hour, 50 * time.Minute, lifecycle.TriggerSchedule, 1},
		{10 * time.Minute, 50 * time.Minute, lifecycle.TriggerSchedule, 0}, // skip policy: late, skipped
	} {
		spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("0 9 * * *"), CatchupWindow: schedule.D(c.window)}, Misfire: dag.MisfireSkip}
		s, err := schedule.Validate(spec.Schedule)
		if err != nil {
			t.Fatal(err)
		}
		pending := at("2027-01-05T09:00:00Z")
		p := planJob(s, &spec, pending, pending.Add(c.late), nil, time.Minute)
		fired := 0
		for _, r := range p.Runs {
			if r.Status == lifecycle.RunPending {
				fired++
			}
		}
		if fired != c.runs {
			t.Errorf("window %s, late %s: %d fired (%s), want %d", c.window, c.late, fired, fmt.Sprint(summarize(p)), c.runs)
		}
	}
}

// TestGiveUpOnExclusionsIsAWakeUpNotAnEnd: when the search for the next
// instant gives up on a long run of exclusions, the job keeps the point
// it stopped at as its wake-up; at it, nothing fires, and the search goes
// on, until the first instant past the exclusions fires.
func TestGiveUpOnExclusionsIsAWakeUpNotAnEnd(t *testing.T) {
	spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("* * * * * *"),
		Exclude: &schedule.Exclude{Cron: []string{"0-29 * * * 1-6 *", "30-59 * * * 1-6 *"}}}, Misfire: dag.MisfireFireOnce}
	s, err := schedule.Parse(spec.Schedule) // Validate refuses it; a spec stored before a change might not be
	if err != nil {
		t.Fatal(err)
	}
	pending := at("2025-12-31T23:59:59Z")
	for wakeUps := 0; ; wakeUps++ {
		p := planJob(s, &spec, pending, pending, nil, time.Minute)
		if p.Done || wakeUps > 10 {
			t.Fatalf("wake-up %d at %s: %s", wakeUps, pending, fmt.Sprint(summarize(p)))
		}
		for _, r := range p.Runs {
			if r.At.Before(at("2026-07-01T00:00:00Z")) && r.At.After(at("2025-12-31T23:59:59Z")) {
				t.Fatalf("an excluded instant ran: %s", r.At)
			}
		}
		if p.Next.Equal(at("2026-07-01T00:00:00Z")) {
			break
		}
		pending = p.Next
	}
}
