package webui

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/lifecycle"
)

// The schedule ledger puts every instant the job's schedule expected in
// the last days beside what happened: a run on time, late by how much,
// skipped (and the policy that skipped it), missed while paused, or
// missed. It uses the job's current schedule (an instant of an older
// version that is not in it is not shown) and its history for the pauses.

const (
	ledgerWindow = 72 * time.Hour
	ledgerRows   = 100
	// onTime is how late a start may be and still be on time.
	onTime = time.Second
	// dueGrace: an instant this recent without a run is due, not missed.
	dueGrace = 5 * time.Second
)

type ledgerRow struct {
	At      *timestamppb.Timestamp
	Outcome string // on_time, late, skipped, pending, missed_paused, missed, due, excluded, backfilled
	Detail  string
	RunID   string
}

// ledgerSince is where the ledger (and the runs it reads) start: the
// window, not before the job existed.
func ledgerSince(j *orreryv1.Job) *timestamppb.Timestamp {
	from := time.Now().Add(-ledgerWindow)
	if c := j.GetCreateTime().AsTime(); c.After(from) {
		from = c
	}
	return timestamppb.New(from)
}

// expected returns the schedule's instants in (from, now], the excluded
// ones too, at most the last ledgerRows; a schedule too dense for the
// window is read over a shorter one.
func expected(s *schedule.Schedule, from, now time.Time) []schedule.Planned {
	const most = 20_000
	for _, w := range []time.Duration{0, 6 * time.Hour, time.Hour, 10 * time.Minute} {
		start := from
		if w > 0 && now.Add(-w).After(from) {
			start = now.Add(-w)
		}
		plan := s.PlanUntil(start, now, most)
		if len(plan) >= most {
			continue // the window holds more: a shorter one
		}
		if len(plan) > ledgerRows {
			plan = plan[len(plan)-ledgerRows:]
		}
		return plan
	}
	return nil
}

// pausedAt reports whether the job was paused at t, from its history
// (newest first) and its status now.
func pausedAt(t time.Time, history []*orreryv1.AuditEntry) bool {
	for _, e := range history { // newest first: the latest change at or before t decides
		if e.GetTime().AsTime().After(t) {
			continue
		}
		switch e.GetAction() {
		case "pause":
			return true
		case "resume", "create":
			return false
		}
	}
	return false
}

func buildLedger(j *orreryv1.Job, history []*orreryv1.AuditEntry, runs []*orreryv1.Run) []ledgerRow {
	s, err := schedule.Parse(api.ScheduleFromProto(j.GetSpec().GetSchedule()))
	if err != nil {
		return nil
	}
	s = s.For(j.GetMetadata().GetNamespace(), j.GetMetadata().GetName())
	now := time.Now()
	byInstant := map[int64]*orreryv1.Run{}
	for _, r := range runs {
		if t := lifecycle.Trigger(r.GetTrigger()); t == lifecycle.TriggerManual || t == lifecycle.TriggerReplay {
			continue
		}
		byInstant[r.GetScheduledTime().AsTime().UnixNano()] = r
	}
	var out []ledgerRow
	for _, p := range expected(s, ledgerSince(j).AsTime().Add(-time.Nanosecond), now) {
		t := p.Instant
		row := ledgerRow{At: timestamppb.New(t)}
		r := byInstant[t.UnixNano()]
		if p.Excluded != "" && r == nil {
			row.Outcome, row.Detail = "excluded", p.Excluded
			out = append(out, row)
			continue
		}
		jitter := p.Fire.Sub(t)
		if p.Fire.IsZero() || (r != nil && lifecycle.Trigger(r.GetTrigger()) == lifecycle.TriggerBackfill) {
			jitter = 0
		}
		switch {
		case r != nil && lifecycle.RunStatus(r.GetStatus()) == lifecycle.RunSkipped:
			row.Outcome, row.Detail, row.RunID = "skipped", "skipped: "+r.GetReason(), r.GetId()
		case r != nil && r.GetStartTime() == nil:
			row.Outcome, row.Detail, row.RunID = "pending", "run "+r.GetStatus()+", not started", r.GetId()
		case r != nil:
			late := r.GetStartTime().AsTime().Sub(t.Add(jitter))
			row.RunID = r.GetId()
			if late < onTime {
				row.Outcome, row.Detail = "on_time", "on time ("+late.Round(time.Millisecond).String()+")"
			} else {
				row.Outcome, row.Detail = "late", fmt.Sprintf("late by %s", late.Round(100*time.Millisecond))
			}
		case pausedAt(t, history):
			row.Outcome, row.Detail = "missed_paused", "missed while paused"
		case now.Sub(t) < dueGrace:
			row.Outcome, row.Detail = "due", "due"
		default:
			row.Outcome, row.Detail = "missed", "missed: no run"
		}
		if r != nil && lifecycle.Trigger(r.GetTrigger()) == lifecycle.TriggerBackfill {
			row.Outcome, row.Detail = "backfilled", "backfilled: "+row.Detail
		} else if jitter > 0 {
			row.Detail += fmt.Sprintf(" (jitter +%s)", jitter)
		}
		out = append(out, row)
	}
	slices.Reverse(out)
	return out
}
