package worker

import (
	"testing"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/internal/run"
)

func lostReport(task uuid.UUID, token int64) run.Report {
	return run.Report{TaskID: task, FencingToken: token, Result: run.LeaseExpired("lost")}
}

// A River job that comes again for an attempt begun here, or for an
// older one, does not run it (late second jobs, adoption after the next
// attempt).
func TestLedgerBeginsAnAttemptOnce(t *testing.T) {
	l := newLedger()
	task := uuid.New()
	if l.begin(task, 5, nil) == nil {
		t.Fatal("the first begin of token 5 is refused")
	}
	if l.begin(task, 5, nil) != nil {
		t.Error("a second job for token 5 begins it again")
	}
	if l.begin(task, 4, nil) != nil {
		t.Error("a late job for the older token 4 begins it")
	}
	if l.begin(task, 6, nil) == nil {
		t.Error("the next attempt (token 6) is refused")
	}
}

// An older attempt's call that ends after a newer attempt of the task
// began here leaves the newer one's entry in place (it stays leased, and
// a lost lease still cancels it).
func TestLedgerEndOfAnOlderAttempt(t *testing.T) {
	l := newLedger()
	task := uuid.New()
	older := l.begin(task, 1, nil)
	newer := l.begin(task, 2, nil)
	l.end(task, older)
	if l.running[task] != newer {
		t.Fatal("the older call's end removed the newer attempt's entry")
	}
	asked := l.snapshot()
	if got := l.settle(asked, map[uuid.UUID]int64{}, true, beatsPerTTL); len(got) != 1 || got[0] != newer {
		t.Fatalf("the newer attempt's lost lease cancels %v", got)
	}
	l.end(task, newer)
	if _, ok := l.running[task]; ok {
		t.Fatal("the newer call's end left its entry")
	}
}

func TestLedgerSettle(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	tests := []struct {
		name    string
		ours    map[uuid.UUID]int64 // nil: the read failed
		renewed bool
		beats   int // snapshots taken before this settle
		cancel  []uuid.UUID
	}{
		{"renewed and held", map[uuid.UUID]int64{a: 1, b: 1}, true, 1, nil},
		{"missing from the database", map[uuid.UUID]int64{a: 1}, true, 1, []uuid.UUID{b}},
		{"another token", map[uuid.UUID]int64{a: 1, b: 2}, true, 1, []uuid.UUID{b}},
		{"read failed, renewal failed, two beats", nil, false, 2, nil},
		{"read failed, renewal failed, a whole TTL", nil, false, beatsPerTTL, []uuid.UUID{a, b}},
		{"renewal failed a whole TTL though the read saw them", map[uuid.UUID]int64{a: 1, b: 1}, false, beatsPerTTL, []uuid.UUID{a, b}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger()
			ea, eb := l.begin(a, 1, nil), l.begin(b, 1, nil)
			var asked map[uuid.UUID]*leased
			for range tt.beats {
				asked = l.snapshot()
			}
			ec := l.begin(c, 1, nil) // began after the snapshot: not decided
			got := l.settle(asked, tt.ours, tt.renewed, beatsPerTTL)
			want := map[*leased]bool{}
			for _, id := range tt.cancel {
				want[map[uuid.UUID]*leased{a: ea, b: eb}[id]] = true
			}
			if len(got) != len(want) {
				t.Fatalf("cancelled %d, want %d", len(got), len(want))
			}
			for _, e := range got {
				if !want[e] || e == ec {
					t.Errorf("cancelled %+v", e)
				}
			}
			if tt.renewed && (ea.unconfirmed != 0 || eb.unconfirmed != 0) {
				t.Error("a renewal did not confirm the attempts asked about")
			}
		})
	}
}

func TestLedgerOrphans(t *testing.T) {
	task := uuid.New()
	held := map[uuid.UUID]int64{task: 3}

	t.Run("two checks apart, then reported as lost", func(t *testing.T) {
		l := newLedger()
		if r := l.orphans(held, l.beginCheck(), lostReport); len(r) != 0 {
			t.Fatal("reported at the first check")
		}
		r := l.orphans(held, l.beginCheck(), lostReport)
		if len(r) != 1 || r[0].Result.ExitReason != "lease_expired" {
			t.Fatalf("second check: %+v", r)
		}
		if l.begin(task, 3, nil) != nil {
			t.Error("a River job for the reported attempt runs it")
		}
	})
	t.Run("held in a call: never", func(t *testing.T) {
		l := newLedger()
		l.hold(task, 1)
		for range 3 {
			if r := l.orphans(held, l.beginCheck(), lostReport); len(r) != 0 {
				t.Fatal("an attempt in a call reported")
			}
		}
	})
	t.Run("the kept report is sent", func(t *testing.T) {
		l := newLedger()
		l.keepUnreported(run.Report{TaskID: task, FencingToken: 3})
		l.orphans(held, l.beginCheck(), lostReport)
		r := l.orphans(held, l.beginCheck(), lostReport)
		if len(r) != 1 || r[0].Result.ExitReason != "" {
			t.Fatalf("want the kept report: %+v", r)
		}
		l.reported(r[0])
		if _, ok := l.unreported[task]; ok {
			t.Error("a delivered report is still kept")
		}
	})
	t.Run("a kept report of another token is not sent", func(t *testing.T) {
		l := newLedger()
		l.keepUnreported(run.Report{TaskID: task, FencingToken: 2})
		l.orphans(held, l.beginCheck(), lostReport)
		if r := l.orphans(held, l.beginCheck(), lostReport); len(r) != 1 || r[0].FencingToken != 3 || r[0].Result.ExitReason != "lease_expired" {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("an older report never replaces a newer one", func(t *testing.T) {
		l := newLedger()
		l.keepUnreported(run.Report{TaskID: task, FencingToken: 3})
		l.keepUnreported(run.Report{TaskID: task, FencingToken: 2})
		if l.unreported[task].v.FencingToken != 3 {
			t.Fatal("replaced")
		}
	})
	t.Run("a stale check does not report an attempt begun since its read", func(t *testing.T) {
		l := newLedger()
		l.orphans(held, l.beginCheck(), lostReport) // a suspect
		check := l.beginCheck()                     // its read: held here, in no call
		if l.begin(task, 3, nil) == nil {           // adopted since
			t.Fatal("adoption refused")
		}
		if r := l.orphans(held, check, lostReport); len(r) != 0 {
			t.Fatalf("the stale check reported %+v", r)
		}
	})
	t.Run("a stale check keeps what it could not see", func(t *testing.T) {
		l := newLedger()
		check := l.beginCheck() // read before the attempt began: nothing held
		l.begin(task, 3, nil)
		l.keepUnreported(run.Report{TaskID: task, FencingToken: 3})
		l.orphans(map[uuid.UUID]int64{}, check, lostReport)
		if _, ok := l.unreported[task]; !ok {
			t.Error("the kept report was forgotten")
		}
		if l.begin(task, 3, nil) != nil {
			t.Error("the begun attempt was forgotten: River's retry runs it again")
		}
	})
	t.Run("what the database no longer holds is forgotten", func(t *testing.T) {
		l := newLedger()
		l.begin(task, 3, nil)
		l.keepUnreported(run.Report{TaskID: task, FencingToken: 3})
		l.orphans(map[uuid.UUID]int64{}, l.beginCheck(), lostReport)
		if _, ok := l.unreported[task]; ok {
			t.Error("kept report of a task no longer held here")
		}
		if _, ok := l.begun[task]; ok {
			t.Error("begun attempt of a task no longer held here")
		}
	})
}
