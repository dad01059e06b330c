package scheduler

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/run"
)

// Triggers of the runs the scheduler writes.
const (
	TriggerSchedule = "schedule"
	TriggerBackfill = "backfill"
)

// Run statuses the scheduler writes (engine/run owns them).
const (
	RunQueued    = run.StatusQueued
	RunPending   = run.StatusPending
	RunSkipped   = run.StatusSkipped
	RunCancelled = run.StatusCancelled
)

// Limits on what one pass over a job enumerates and records.
const (
	maxEnumerate  = 100_000 // due instants looked at in one pass
	maxSkipRecord = 100     // skipped instants recorded one by one; the rest in one summary run
)

type activeRun struct {
	ID     uuid.UUID
	Status string
}

// planned is one run to write.
type planned struct {
	At      time.Time
	Trigger string
	Status  string
	Reason  string
}

// plan is what to do with one due job.
type plan struct {
	Runs   []planned
	Cancel []uuid.UUID // active runs that cancel_previous replaces
	Next   time.Time
	Done   bool // nothing left to fire
	Skips  map[string]int
}

// planJob decides, for a job whose pending instant has come, which instants
// run, which are skipped and why (misfire, then overlap policy), which
// active runs are cancelled, and the job's next fire time. misfireAfter is
// how late an instant may be and still count as on time.
func planJob(s *schedule.Schedule, spec *dag.JobSpec, pending, now time.Time, active []activeRun, misfireAfter time.Duration) plan {
	p := plan{Skips: map[string]int{}}
	due := []time.Time{pending}
	truncated := false
	if !s.OneTime() {
		for at := pending; ; {
			next, ok := s.Next(at)
			if !ok || next.After(now) {
				break
			}
			if len(due) == maxEnumerate {
				truncated = true
				break
			}
			due = append(due, next)
			at = next
		}
	}

	fire, skip, skipWhy := due, []time.Time(nil), ""
	trigger := TriggerSchedule
	if now.Sub(due[0]) > misfireAfter || truncated {
		switch spec.Misfire {
		case dag.MisfireSkip:
			fire, skip, skipWhy = nil, due, "misfire: skip"
		case dag.MisfireBackfill:
			keep := min(max(spec.MaxBackfill, 1), len(due))
			fire, skip = due[len(due)-keep:], due[:len(due)-keep]
			skipWhy = fmt.Sprintf("misfire: backfill keeps the latest %d", keep)
			trigger = TriggerBackfill
		default: // fire_once
			fire, skip, skipWhy = due[len(due)-1:], due[:len(due)-1], "misfire: fire_once fired the latest missed instant"
		}
	}
	p.recordSkips(skip, skipWhy, truncated)

	activeCount, queued := 0, false
	for _, r := range active {
		if r.Status == RunQueued {
			queued = true
		} else {
			activeCount++
		}
	}
	for _, at := range fire {
		run := planned{At: at, Trigger: trigger, Status: RunPending}
		switch spec.Overlap {
		case dag.OverlapAllow:
		case dag.OverlapSkip:
			if activeCount > 0 || queued {
				run.Status, run.Reason = RunSkipped, "overlap: skip (the previous run is still active)"
			}
		case dag.OverlapQueue:
			switch {
			case activeCount == 0 && !queued:
			case !queued:
				run.Status, run.Reason, queued = RunQueued, "overlap: queue (waits for the previous run)", true
			default:
				run.Status, run.Reason = RunSkipped, "overlap: queue already holds a run"
			}
		case dag.OverlapCancelPrevious:
			for _, r := range active {
				p.Cancel = append(p.Cancel, r.ID)
			}
			active = nil
			for i := range p.Runs { // runs planned earlier in this pass
				if p.Runs[i].Status == RunPending || p.Runs[i].Status == RunQueued {
					p.Runs[i].Status, p.Runs[i].Reason = RunCancelled, "overlap: cancel_previous (a newer instant fired)"
				}
			}
			activeCount, queued = 0, false
		}
		if run.Status == RunSkipped {
			p.Skips[run.Reason]++
		} else if run.Status == RunPending {
			activeCount++
		}
		p.Runs = append(p.Runs, run)
	}

	last := due[len(due)-1]
	if truncated {
		last = now
	}
	if s.OneTime() {
		p.Done = true
	} else if next, ok := s.Next(last); ok {
		p.Next = next
	} else {
		p.Done = true
	}
	return p
}

// recordSkips records skipped instants: the latest ones one by one, and the
// rest as one summary run at the earliest, so that a long outage of a
// dense schedule neither vanishes from history nor floods it.
func (p *plan) recordSkips(skip []time.Time, why string, truncated bool) {
	if len(skip) == 0 {
		return
	}
	p.Skips[why] += len(skip)
	if len(skip) > maxSkipRecord {
		rest := skip[:len(skip)-maxSkipRecord+1]
		count := fmt.Sprint(len(rest))
		if truncated {
			count = "at least " + count
		}
		p.Runs = append(p.Runs, planned{At: rest[0], Trigger: TriggerSchedule, Status: RunSkipped,
			Reason: fmt.Sprintf("%s (%s instants from %s to %s)", why, count, rest[0].Format(time.RFC3339), rest[len(rest)-1].Format(time.RFC3339))})
		skip = skip[len(skip)-maxSkipRecord+1:]
	}
	for _, at := range skip {
		p.Runs = append(p.Runs, planned{At: at, Trigger: TriggerSchedule, Status: RunSkipped, Reason: why})
	}
}
