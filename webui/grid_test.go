package webui

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag"
)

// A job of 10,000 steps: the grid draws gridMaxRows of them, in the
// spec's order, and says how many it left out.
func TestGridOfAWideJob(t *testing.T) {
	var spec dag.JobSpec
	var steps []*orreryv1.RunStep
	for i := range 10_000 {
		name := fmt.Sprintf("s%05d", i)
		spec.Steps = append(spec.Steps, dag.Step{Name: name})
		steps = append(steps, &orreryv1.RunStep{Step: name, Status: "succeeded"})
	}
	runs := []*orreryv1.Run{{Id: "b", Steps: steps}, {Id: "a", Steps: steps[:10]}}
	g := buildGrid(spec, runs)
	if len(g.Rows) != gridMaxRows || g.Hidden != 10_000-gridMaxRows || g.Rows[0].Step != "s00000" {
		t.Fatalf("%d rows, %d hidden, first %s", len(g.Rows), g.Hidden, g.Rows[0].Step)
	}
	// Oldest run on the left: a has steps 0-9 only.
	if c := g.Rows[20].Cells; c[0].RunID != "a" || c[0].Status != "" || c[1].Mark != "✓" {
		t.Errorf("row 20: %+v", c)
	}
}

// The time axis spans a wait that goes on (a task released an hour ago
// with no attempt yet), not only the attempts.
func TestTimelineSpansAWaitThatGoesOn(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	tasks := []*orreryv1.Task{
		{Step: "a", ReleaseTime: ts(-time.Hour), FinishTime: ts(-time.Hour + 2*time.Second),
			Attempts: []*orreryv1.Attempt{{Number: 1, Outcome: "succeeded", StartTime: ts(-time.Hour), FinishTime: ts(-time.Hour + 2*time.Second)}}},
		{Step: "b", ReleaseTime: ts(-time.Hour + 2*time.Second)},
	}
	tl := buildTimeline(tasks, now)
	if len(tl.Rows) != 2 || tl.Rows[1].Wait == nil {
		t.Fatalf("rows %+v", tl.Rows)
	}
	if end := tl.Rows[1].Wait.X + tl.Rows[1].Wait.W; end > tlLabel+tlPlot+0.001 || end < tlLabel+tlPlot-1 {
		t.Errorf("b's wait ends at %.1f, want the axis' end %.1f", end, tlLabel+tlPlot)
	}
}
