package dag

import (
	"time"

	"github.com/orrery-dev/orrery/dag/schedule"
)

// Duration is a time.Duration written as a Go duration string ("30s",
// "10m", "1h30m") in YAML and JSON (schedule.Duration, which a schedule's
// jitter and catchup_window use too).
type Duration = schedule.Duration

// D makes a *Duration.
func D(d time.Duration) *Duration { return schedule.D(d) }
