package lifecycle

import (
	"fmt"
	"time"

	"github.com/orrery-dev/orrery/dag"
)

// SkipCause is what passed over an instant or an upstream end that got no
// run (the metric orrery_instants_skipped_total's label).
type SkipCause string

// What skips an instant.
const (
	SkippedByMisfire  SkipCause = "misfire"  // the job's misfire policy
	SkippedByOverlap  SkipCause = "overlap"  // its overlap policy
	SkippedByUpstream SkipCause = "upstream" // a chain of runs started by each other's ends past its bound
)

// ReasonMisfireSkip is the reason of instants misfire: skip passed over.
const ReasonMisfireSkip = "misfire: skip"

// Misfire is what a job's misfire policy makes of its due instants.
type Misfire struct {
	Fire    []time.Time // instants that run
	Skip    []time.Time // instants recorded as skipped, for Reason
	Reason  string
	Trigger Trigger // of the runs that fire
}

// MisfireKeep is how many of the latest missed instants policy fires:
// none for skip, the latest for fire_once, up to maxBackfill for backfill.
// Resuming a paused job moves its next fire time by it
// (schedule.CatchUp), and firing keeps as many (DecideMisfire).
func MisfireKeep(policy dag.MisfirePolicy, maxBackfill int) int {
	switch policy {
	case dag.MisfireSkip:
		return 0
	case dag.MisfireBackfill:
		return max(maxBackfill, 1)
	}
	return 1 // fire_once
}

// DecideMisfire decides which of a job's due instants (oldest first, at
// least one) fire. Late says they count as missed: the oldest is later
// than the misfire grace, or there were too many to enumerate. On time,
// all fire.
func DecideMisfire(policy dag.MisfirePolicy, maxBackfill int, due []time.Time, late bool) Misfire {
	if !late {
		return Misfire{Fire: due, Trigger: TriggerSchedule}
	}
	keep := min(MisfireKeep(policy, maxBackfill), len(due))
	m := Misfire{Fire: due[len(due)-keep:], Skip: due[:len(due)-keep], Trigger: TriggerSchedule}
	switch policy {
	case dag.MisfireSkip:
		m.Reason = ReasonMisfireSkip
	case dag.MisfireBackfill:
		m.Reason, m.Trigger = fmt.Sprintf("misfire: backfill keeps the latest %d", keep), TriggerBackfill
	default:
		m.Reason = "misfire: fire_once fired the latest missed instant"
	}
	return m
}
