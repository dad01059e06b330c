package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/lifecycle"
)

// planStarts holds ends to the misfire and overlap policies and the
// depth limit.
func TestPlanDownstream(t *testing.T) {
	s, err := schedule.Validate(schedule.Spec{After: &schedule.After{Job: "up"}, CatchupWindow: schedule.D(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	now := at("2026-12-01T12:00:00Z")
	ends := func(ago ...time.Duration) []upstreamEnd {
		var out []upstreamEnd
		for _, a := range ago {
			out = append(out, upstreamEnd{At: now.Add(-a), Depth: 1})
		}
		return out
	}
	statuses := func(p plan) string {
		var out []string
		for _, r := range p.Runs {
			out = append(out, string(r.Status))
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		name   string
		spec   dag.JobSpec
		ends   []upstreamEnd
		active []activeRun
		want   string
	}{
		{"on time, allow", dag.JobSpec{Misfire: dag.MisfireFireOnce, Overlap: dag.OverlapAllow}, ends(3*time.Second, time.Second), nil, "pending pending"},
		{"one late, one on time, fire_once", dag.JobSpec{Misfire: dag.MisfireFireOnce, Overlap: dag.OverlapAllow}, ends(time.Hour, time.Second), nil, "pending pending"},
		{"two late, fire_once", dag.JobSpec{Misfire: dag.MisfireFireOnce, Overlap: dag.OverlapAllow}, ends(2*time.Hour, time.Hour, time.Second), nil, "skipped pending pending"},
		{"late, skip", dag.JobSpec{Misfire: dag.MisfireSkip, Overlap: dag.OverlapAllow}, ends(time.Hour), nil, "skipped"},
		{"overlap skip", dag.JobSpec{Misfire: dag.MisfireFireOnce, Overlap: dag.OverlapSkip}, ends(time.Second), []activeRun{{uuid.New(), lifecycle.RunRunning}}, "skipped"},
		{"too deep", dag.JobSpec{Misfire: dag.MisfireFireOnce, Overlap: dag.OverlapAllow}, []upstreamEnd{{At: now, Depth: MaxUpstreamDepth + 1}}, nil, "skipped"},
	} {
		p := planStarts(s, &c.spec, c.ends, now, c.active, time.Minute, lifecycle.TriggerUpstream)
		if got := statuses(p); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
		for _, r := range p.Runs {
			if r.Trigger != lifecycle.TriggerUpstream {
				t.Errorf("%s: trigger %s", c.name, r.Trigger)
			}
		}
	}
}
