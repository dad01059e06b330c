package webui

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// The ledger puts each expected instant beside what happened: on time,
// late, skipped (with the policy), pending, missed while paused, missed.
func TestLedgerClassifiesEveryInstant(t *testing.T) {
	now := time.Now().UTC()
	hour := now.Truncate(time.Hour)
	at := func(h int) time.Time { return hour.Add(-time.Duration(h) * time.Hour) }
	ts := timestamppb.New
	j := &orreryv1.Job{
		Spec:       &orreryv1.JobSpec{Schedule: &orreryv1.Schedule{Cron: "0 * * * *"}},
		CreateTime: ts(at(10).Add(-time.Minute)),
	}
	runs := []*orreryv1.Run{
		{Id: "r1", ScheduledTime: ts(at(1)), Trigger: "schedule", Status: "succeeded", StartTime: ts(at(1).Add(200 * time.Millisecond))},
		{Id: "r2", ScheduledTime: ts(at(2)), Trigger: "schedule", Status: "succeeded", StartTime: ts(at(2).Add(3 * time.Second))},
		{Id: "r3", ScheduledTime: ts(at(3)), Trigger: "schedule", Status: "skipped", Reason: "overlap: skip"},
		{Id: "r4", ScheduledTime: ts(at(4)), Trigger: "schedule", Status: "queued"},
		{Id: "m", ScheduledTime: ts(at(7)), Trigger: "manual", Status: "succeeded", StartTime: ts(at(7))},
	}
	history := []*orreryv1.AuditEntry{ // newest first
		{Action: "resume", Time: ts(at(5).Add(-30 * time.Minute))},
		{Action: "pause", Time: ts(at(6).Add(-30 * time.Minute))},
		{Action: "create", Time: ts(at(10).Add(-time.Minute))},
	}
	rows := buildLedger(j, history, runs)
	want := map[time.Time]string{
		at(0): "due", at(1): "on_time", at(2): "late", at(3): "skipped", at(4): "pending", at(5): "missed",
		at(6): "missed_paused", at(7): "missed", at(8): "missed", at(9): "missed", at(10): "missed",
	}
	if now.Sub(at(0)) >= dueGrace {
		want[at(0)] = "missed"
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, r := range rows {
		if i > 0 && !r.At.AsTime().Before(rows[i-1].At.AsTime()) {
			t.Errorf("row %d is not older than the one before", i)
		}
		if got := want[r.At.AsTime()]; got != r.Outcome {
			t.Errorf("%s: %s (%s), want %s", r.At.AsTime().Format(time.RFC3339), r.Outcome, r.Detail, got)
		}
	}
	if rows[3].Detail != "skipped: overlap: skip" || rows[2].Detail != "late by 3s" {
		t.Errorf("details: %q, %q", rows[3].Detail, rows[2].Detail)
	}
}
