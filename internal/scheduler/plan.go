package scheduler

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/lifecycle"
)

// Limits on what one pass over a job enumerates and records.
const (
	maxEnumerate  = 100_000 // due instants looked at in one pass
	maxSkipRecord = 100     // skipped instants recorded one by one; the rest in one summary run
)

type activeRun struct {
	ID     uuid.UUID
	Status lifecycle.RunStatus
}

// planned is one run to write.
type planned struct {
	At      time.Time
	Trigger lifecycle.Trigger
	Status  lifecycle.RunStatus
	Reason  string
}

// plan is what to do with one due job.
type plan struct {
	Runs   []planned
	Cancel []uuid.UUID // active runs that cancel_previous replaces
	Next   time.Time
	Done   bool // nothing left to fire
	Skips  map[skipped]int
}

// skipped is why instants got no run: what skipped them, and the reason
// their records give.
type skipped struct {
	cause  lifecycle.SkipCause
	reason string
}

// planJob decides, for a job whose pending fire time has come, which
// instants run, which are skipped and why (misfire, then overlap policy),
// which active runs are cancelled, and the job's next fire time. A fire
// time is its instant plus the instant's jitter (schedule.Fire); the runs
// are written for the instants. misfireAfter is how late an instant may
// fire and still count as on time, unless the job's schedule has a
// catchup_window of its own.
func planJob(s *schedule.Schedule, spec *dag.JobSpec, pending, now time.Time, active []activeRun, misfireAfter time.Duration) plan {
	p := plan{Skips: map[skipped]int{}}
	if w := s.CatchupWindow(); w > 0 {
		misfireAfter = w
	}
	late := now.Sub(pending) > misfireAfter
	pending = s.InstantOf(pending)
	var due []time.Time
	if s.OneTime() || s.Excluded(pending) == "" {
		due = append(due, pending) // excluded: where Next gave up on a long run of exclusions
	}
	truncated := false
	if !s.OneTime() {
		for at := pending; ; {
			next, ok := s.Next(at)
			if !ok || s.Fire(next).After(now) {
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

	m := lifecycle.DecideMisfire(spec.Misfire, spec.MaxBackfill, due, late || truncated)
	p.recordSkips(m.Skip, skipped{lifecycle.SkippedByMisfire, m.Reason}, lifecycle.TriggerSchedule, truncated)
	p.overlap(spec, m.Fire, m.Trigger, active)

	last := pending
	if len(due) > 0 {
		last = due[len(due)-1]
	}
	if truncated {
		last = now
	}
	if s.OneTime() {
		p.Done = true
	} else if next, ok := s.Next(last); ok {
		p.Next = s.Fire(next)
	} else if !next.IsZero() {
		p.Next = next // Next gave up on a run of exclusions: search on from there then
	} else {
		p.Done = true
	}
	return p
}

// recordSkips records skipped instants: the latest ones one by one, and the
// rest as one summary run at the earliest, so that a long outage of a
// dense schedule neither vanishes from history nor floods it.
func (p *plan) recordSkips(skip []time.Time, by skipped, trigger lifecycle.Trigger, truncated bool) {
	if len(skip) == 0 {
		return
	}
	p.Skips[by] += len(skip)
	why := by.reason
	if len(skip) > maxSkipRecord {
		rest := skip[:len(skip)-maxSkipRecord+1]
		count := fmt.Sprint(len(rest))
		if truncated {
			count = "at least " + count
		}
		p.Runs = append(p.Runs, planned{At: rest[0], Trigger: trigger, Status: lifecycle.RunSkipped,
			Reason: fmt.Sprintf("%s (%s instants from %s to %s)", why, count, rest[0].Format(time.RFC3339), rest[len(rest)-1].Format(time.RFC3339))})
		skip = skip[len(skip)-maxSkipRecord+1:]
	}
	for _, at := range skip {
		p.Runs = append(p.Runs, planned{At: at, Trigger: trigger, Status: lifecycle.RunSkipped, Reason: why})
	}
}

// overlap plans runs at fire by the job's overlap policy, weighing its
// active runs and the runs planned before them: each runs, waits
// (queued), is skipped, or cancels the ones before (cancel_previous).
func (p *plan) overlap(spec *dag.JobSpec, fire []time.Time, trigger lifecycle.Trigger, active []activeRun) {
	statuses := make([]lifecycle.RunStatus, len(active))
	for i, r := range active {
		statuses[i] = r.Status
	}
	overlap := lifecycle.NewOverlap(spec.Overlap, statuses)
	for _, at := range fire {
		d := overlap.Next()
		if d.CancelPrevious {
			for _, r := range active {
				p.Cancel = append(p.Cancel, r.ID)
			}
			active = nil
			for i := range p.Runs { // runs planned earlier in this pass
				if st := p.Runs[i].Status; st == lifecycle.RunPending || st == lifecycle.RunQueued {
					p.Runs[i].Status, p.Runs[i].Reason = lifecycle.RunCancelled, lifecycle.ReasonCancelledByNewer
				}
			}
		}
		if d.Status == lifecycle.RunSkipped {
			p.Skips[skipped{lifecycle.SkippedByOverlap, d.Reason}]++
		}
		p.Runs = append(p.Runs, planned{At: at, Trigger: trigger, Status: d.Status, Reason: d.Reason})
	}
}
