package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
)

func TestFinishAttempt(t *testing.T) {
	half := func(n int64) int64 { return n / 2 }
	base := Shape{Attempt: 1, MaxAttempts: 3, Initial: time.Second, Max: time.Minute}
	with := func(f func(*Shape)) Shape { s := base; f(&s); return s }
	tests := []struct {
		name  string
		shape Shape
		end   Ending
		want  Finish
	}{
		{"success, leaf of a larger run", base, Ending{OK: true},
			Finish{Task: TaskSucceeded, Outcome: AttemptSucceeded, MayEndRun: true}},
		{"success releases children", with(func(s *Shape) { s.HasChildren = true }), Ending{OK: true},
			Finish{Task: TaskSucceeded, Outcome: AttemptSucceeded, ReleaseChildren: true, MayEndRun: true}},
		{"success ends a one-task run and starts the held one", with(func(s *Shape) { s.SingleTask, s.HoldsRuns = true, true }), Ending{OK: true},
			Finish{Task: TaskSucceeded, Outcome: AttemptSucceeded, Run: RunSucceeded, MayEndRun: true, PromoteHeld: true}},
		{"retryable failure retries after backoff", base, Ending{Retryable: true},
			Finish{Task: TaskRetrying, Outcome: AttemptFailed, NextAttempt: 2, RetryIn: time.Second}},
		{"third retry: backoff doubles twice, half jittered", with(func(s *Shape) { s.Attempt, s.MaxAttempts = 3, 5 }), Ending{Retryable: true},
			Finish{Task: TaskRetrying, Outcome: AttemptFailed, NextAttempt: 4, RetryIn: time.Second + 3*time.Second/2}},
		{"lapsed lease retries at once", base, Ending{Retryable: true, LeaseLapsed: true},
			Finish{Task: TaskRetrying, Outcome: AttemptFailed, NextAttempt: 2}},
		{"a one-task run's retry does not end it", with(func(s *Shape) { s.SingleTask = true }), Ending{Retryable: true},
			Finish{Task: TaskRetrying, Outcome: AttemptFailed, NextAttempt: 2, RetryIn: time.Second}},
		{"out of attempts dead-letters", with(func(s *Shape) { s.Attempt = 3 }), Ending{Retryable: true},
			Finish{Task: TaskDeadLettered, Outcome: AttemptFailed, MayEndRun: true}},
		{"not retryable dead-letters and fails descendants", with(func(s *Shape) { s.HasChildren = true }), Ending{},
			Finish{Task: TaskDeadLettered, Outcome: AttemptFailed, FailDescendants: true, MayEndRun: true}},
		{"a one-task run dead-letters with its task", with(func(s *Shape) { s.SingleTask = true }), Ending{},
			Finish{Task: TaskDeadLettered, Outcome: AttemptFailed, Run: RunFailed, RunReason: "1 task(s) dead-lettered", MayEndRun: true}},
		{"a timeout that skips skips the task and its descendants", with(func(s *Shape) { s.SkipOnTimeout, s.HasChildren = true, true }), Ending{TimedOut: true},
			Finish{Task: TaskSkipped, Outcome: AttemptFailed, SkipDescendants: true, MayEndRun: true}},
		{"a skipped one-task run succeeds", with(func(s *Shape) { s.SkipOnTimeout, s.SingleTask = true, true }), Ending{TimedOut: true},
			Finish{Task: TaskSkipped, Outcome: AttemptFailed, Run: RunSucceeded, MayEndRun: true}},
		{"a timeout that does not skip fails", with(func(s *Shape) { s.HasChildren = true }), Ending{TimedOut: true},
			Finish{Task: TaskDeadLettered, Outcome: AttemptFailed, FailDescendants: true, MayEndRun: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FinishAttempt(tt.shape, tt.end, half); got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if got, want := Cascades(tt.shape, tt.end), tt.want.FailDescendants || tt.want.SkipDescendants; got != want {
				t.Errorf("Cascades = %v, want %v", got, want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	top := func(n int64) int64 { return n - 1 }
	for _, tt := range []struct {
		initial, max time.Duration
		n            int
		lo, hi       time.Duration
	}{
		{time.Second, time.Minute, 1, time.Second, time.Second},
		{time.Second, time.Minute, 2, time.Second, 2 * time.Second},
		{time.Second, time.Minute, 10, time.Second, time.Minute},
		{time.Second, time.Minute, 1000, time.Second, time.Minute}, // no overflow
		{time.Minute, time.Second, 3, time.Minute, time.Minute},    // max below initial
	} {
		lo := Backoff(tt.initial, tt.max, tt.n, func(int64) int64 { return 0 })
		hi := Backoff(tt.initial, tt.max, tt.n, top)
		if lo != tt.lo || hi > tt.hi || hi < tt.hi-time.Nanosecond {
			t.Errorf("Backoff(%s, %s, %d) in [%s, %s], want [%s, %s)", tt.initial, tt.max, tt.n, lo, hi, tt.lo, tt.hi)
		}
		if got := Backoff(tt.initial, tt.max, tt.n, nil); got < tt.lo || got > tt.hi {
			t.Errorf("Backoff with rand = %s", got)
		}
	}
}

// Overlap decides a firing of several instants one by one, and a manual
// trigger as one.
func TestOverlap(t *testing.T) {
	tests := []struct {
		policy dag.OverlapPolicy
		active []RunStatus
		n      int
		want   string
	}{
		{dag.OverlapAllow, []RunStatus{RunRunning}, 2, "pending pending"},
		{dag.OverlapSkip, nil, 2, "pending skipped(skip)"},
		{dag.OverlapSkip, []RunStatus{RunPending}, 1, "skipped(skip)"},
		{dag.OverlapSkip, []RunStatus{RunQueued}, 1, "skipped(skip)"},
		{dag.OverlapQueue, nil, 3, "pending queued skipped(full)"},
		{dag.OverlapQueue, []RunStatus{RunRunning}, 2, "queued skipped(full)"},
		{dag.OverlapQueue, []RunStatus{RunRunning, RunQueued}, 1, "skipped(full)"},
		{dag.OverlapCancelPrevious, []RunStatus{RunRunning}, 2, "pending+cancel pending+cancel"},
		{dag.OverlapCancelPrevious, nil, 1, "pending+cancel"},
	}
	short := map[string]string{ReasonOverlapSkip: "skip", ReasonOverlapQueueFull: "full", ReasonOverlapQueue: ""}
	for _, tt := range tests {
		o := NewOverlap(tt.policy, tt.active)
		var got []string
		for range tt.n {
			d := o.Next()
			s := string(d.Status)
			if r := short[d.Reason]; r != "" {
				s += "(" + r + ")"
			}
			if d.CancelPrevious {
				s += "+cancel"
			}
			got = append(got, s)
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("%s over %v, %d runs: %q, want %q", tt.policy, tt.active, tt.n, g, tt.want)
		}
	}
}

func TestDecideMisfire(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	due := []time.Time{t0, t0.Add(time.Hour), t0.Add(2 * time.Hour)}
	show := func(m Misfire) string {
		return fmt.Sprintf("fire %d skip %d %s %q", len(m.Fire), len(m.Skip), m.Trigger, m.Reason)
	}
	tests := []struct {
		policy dag.MisfirePolicy
		keep   int
		late   bool
		want   string
	}{
		{dag.MisfireSkip, 0, false, `fire 3 skip 0 schedule ""`},
		{dag.MisfireSkip, 0, true, `fire 0 skip 3 schedule "misfire: skip"`},
		{dag.MisfireFireOnce, 0, true, `fire 1 skip 2 schedule "misfire: fire_once fired the latest missed instant"`},
		{dag.MisfireBackfill, 2, true, `fire 2 skip 1 backfill "misfire: backfill keeps the latest 2"`},
		{dag.MisfireBackfill, 10, true, `fire 3 skip 0 backfill "misfire: backfill keeps the latest 3"`},
		{dag.MisfireBackfill, 0, true, `fire 1 skip 2 backfill "misfire: backfill keeps the latest 1"`},
	}
	for _, tt := range tests {
		m := DecideMisfire(tt.policy, tt.keep, due, tt.late)
		if got := show(m); got != tt.want {
			t.Errorf("%s keep %d late %v: %s, want %s", tt.policy, tt.keep, tt.late, got, tt.want)
		}
		if len(m.Fire) > 0 && !m.Fire[len(m.Fire)-1].Equal(due[len(due)-1]) {
			t.Errorf("%s: the latest instant does not fire", tt.policy)
		}
		if tt.late && len(m.Fire) != min(MisfireKeep(tt.policy, tt.keep), len(due)) {
			t.Errorf("%s: fired %d, MisfireKeep says %d", tt.policy, len(m.Fire), MisfireKeep(tt.policy, tt.keep))
		}
	}
}

func TestParseRunStatus(t *testing.T) {
	for _, s := range RunStatuses {
		if got, err := ParseRunStatus(string(s)); err != nil || got != s {
			t.Errorf("%s: %v %v", s, got, err)
		}
	}
	if _, err := ParseRunStatus("done"); err == nil || !strings.Contains(err.Error(), "queued, pending, running") {
		t.Errorf("done: %v", err)
	}
}
