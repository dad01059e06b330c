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

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func summarize(p plan) string {
	var parts []string
	for _, r := range p.Runs {
		parts = append(parts, r.At.Format("15:04")+"="+string(r.Status))
	}
	return strings.Join(parts, " ")
}

func TestPlanMisfireAndOverlap(t *testing.T) {
	every10, _ := schedule.Parse(schedule.Spec{Cron: schedule.Crons("*/10 * * * *")})
	prev := activeRun{ID: uuid.New(), Status: lifecycle.RunRunning}
	tests := []struct {
		name    string
		misfire dag.MisfirePolicy
		backN   int
		overlap dag.OverlapPolicy
		pending string
		now     string
		active  []activeRun
		want    string
		next    string
		cancels int
	}{
		{"on time", dag.MisfireFireOnce, 0, dag.OverlapSkip, "10:00", "10:00:01", nil, "10:00=pending", "10:10", 0},
		{"skip", dag.MisfireSkip, 0, dag.OverlapSkip, "10:00", "10:35", nil, "10:00=skipped 10:10=skipped 10:20=skipped 10:30=skipped", "10:40", 0},
		{"fire_once", dag.MisfireFireOnce, 0, dag.OverlapSkip, "10:00", "10:35", nil, "10:00=skipped 10:10=skipped 10:20=skipped 10:30=pending", "10:40", 0},
		{"backfill 2", dag.MisfireBackfill, 2, dag.OverlapAllow, "10:00", "10:35", nil, "10:00=skipped 10:10=skipped 10:20=pending 10:30=pending", "10:40", 0},
		{"overlap skip", dag.MisfireFireOnce, 0, dag.OverlapSkip, "10:00", "10:00:01", []activeRun{prev}, "10:00=skipped", "10:10", 0},
		{"overlap queue holds one", dag.MisfireBackfill, 3, dag.OverlapQueue, "10:00", "10:25", []activeRun{prev}, "10:00=queued 10:10=skipped 10:20=skipped", "10:30", 0},
		{"overlap allow", dag.MisfireFireOnce, 0, dag.OverlapAllow, "10:00", "10:00:01", []activeRun{prev}, "10:00=pending", "10:10", 0},
		{"cancel previous", dag.MisfireBackfill, 2, dag.OverlapCancelPrevious, "10:00", "10:15", []activeRun{prev}, "10:00=cancelled 10:10=pending", "10:20", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &dag.JobSpec{Misfire: tt.misfire, MaxBackfill: tt.backN, Overlap: tt.overlap}
			now := at("2026-06-01T" + tt.now + map[bool]string{true: "", false: ":00"}[strings.Count(tt.now, ":") == 2] + "Z")
			p := planJob(every10, spec, at("2026-06-01T"+tt.pending+":00Z"), now, tt.active, time.Minute)
			if got := summarize(p); got != tt.want {
				t.Errorf("runs %q, want %q", got, tt.want)
			}
			if got := p.Next.Format("15:04"); got != tt.next || p.Done {
				t.Errorf("next %s (done %v), want %s", got, p.Done, tt.next)
			}
			if len(p.Cancel) != tt.cancels {
				t.Errorf("cancels %d, want %d", len(p.Cancel), tt.cancels)
			}
		})
	}
}

func TestPlanLongOutageIsSummarized(t *testing.T) {
	everySecond, _ := schedule.Parse(schedule.Spec{Cron: schedule.Crons("* * * * * *")})
	spec := &dag.JobSpec{Misfire: dag.MisfireSkip, Overlap: dag.OverlapSkip}
	p := planJob(everySecond, spec, at("2026-06-01T00:00:00Z"), at("2026-06-01T01:00:00Z"), nil, time.Minute)
	if len(p.Runs) != maxSkipRecord {
		t.Fatalf("%d skipped runs recorded, want %d", len(p.Runs), maxSkipRecord)
	}
	if !strings.Contains(p.Runs[0].Reason, "3502 instants from 2026-06-01T00:00:00Z") {
		t.Fatalf("summary: %s", p.Runs[0].Reason)
	}
	if p.Skips[skipped{lifecycle.SkippedByMisfire, "misfire: skip"}] != 3601 || !p.Next.Equal(at("2026-06-01T01:00:01Z")) {
		t.Fatalf("skips %v next %s", p.Skips, p.Next)
	}
}

func TestPlanSlightlyLateFiresEveryDueInstant(t *testing.T) {
	everySecond, _ := schedule.Parse(schedule.Spec{Cron: schedule.Crons("* * * * * *")})
	p := planJob(everySecond, &dag.JobSpec{Misfire: dag.MisfireSkip, Overlap: dag.OverlapAllow}, at("2026-06-01T10:00:00Z"), at("2026-06-01T10:00:03Z"), nil, time.Minute)
	if len(p.Runs) != 4 || p.Runs[3].Status != lifecycle.RunPending || len(p.Skips) != 0 {
		t.Fatalf("%+v", p.Runs)
	}
}

func TestPlanOneTime(t *testing.T) {
	once, _ := schedule.Parse(schedule.Spec{At: "2026-06-01T10:00:00Z"})
	p := planJob(once, &dag.JobSpec{Misfire: dag.MisfireSkip, Overlap: dag.OverlapSkip}, at("2026-06-01T10:00:00Z"), at("2026-06-01T12:00:00Z"), nil, time.Minute)
	if summarize(p) != "10:00=skipped" || !p.Done {
		t.Fatalf("%s done=%v", summarize(p), p.Done)
	}
}
