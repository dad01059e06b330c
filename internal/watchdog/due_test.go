package watchdog

import (
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// A run is late from when it was due: a scheduled run from its jittered
// fire time, a range backfill's run and a manual one from their creation.
func TestLatenessCountsFromWhenARunWasDue(t *testing.T) {
	s, err := schedule.Validate(schedule.Spec{Cron: schedule.Crons("0 * * * *"), Jitter: schedule.D(30 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	j := &jobInfo{namespace: "ops", name: "hourly", sched: s.For("ops", "hourly")}
	instant := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	created := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	fire := j.sched.Fire(instant)
	if fire.Equal(instant) {
		t.Fatal("pick an instant with an offset")
	}
	for _, c := range []struct {
		trigger    lifecycle.Trigger
		backfilled bool
		want       time.Time
	}{
		{lifecycle.TriggerSchedule, false, fire},
		{lifecycle.TriggerBackfill, false, fire}, // a missed instant caught up: late since its time
		{lifecycle.TriggerBackfill, true, created},
		{lifecycle.TriggerManual, false, created},
	} {
		r := store.OpenWatchedRunsRow{ScheduledFor: instant, Trigger: c.trigger, Backfilled: c.backfilled, CreatedAt: created}
		if got := j.due(r); !got.Equal(c.want) {
			t.Errorf("%s (range backfill %v): due %s, want %s", c.trigger, c.backfilled, got, c.want)
		}
	}
	if got := j.instantOf(fire); !got.Equal(instant) {
		t.Errorf("instantOf(%s) = %s, want %s", fire, got, instant)
	}
}
