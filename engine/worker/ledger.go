package worker

import (
	"context"
	"sync"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/internal/run"
)

// ledger is the worker's bookkeeping of the attempts it runs, by task and
// fencing token: which attempts run in a call of this process (and their
// leases), how many calls hold each task, the reports that failed, the
// attempts this process began (never taken up twice), and the orphan
// check's suspects. It decides; it does no I/O. Every method takes its
// lock; the table tests in ledger_test.go walk the interleavings.
type ledger struct {
	mu      sync.Mutex
	running map[uuid.UUID]*leased // attempts running in a call, by task
	// busy counts the work calls under way per task, from before the
	// attempt's start to after its report: a task the database says runs
	// here and that no call holds has lost its report (see orphans).
	busy map[uuid.UUID]int
	// unreported keeps the reports that failed, for the orphan check to
	// deliver again.
	unreported map[uuid.UUID]kept[run.Report]
	// begun holds the attempts (task and token) whose step this process
	// began, or whose report the orphan check sends: such an attempt is
	// never taken up again here (run.OwnAttempt), even when the call that
	// ran it ended without a report (a panic). The orphan check forgets
	// those it no longer finds held here.
	begun map[uuid.UUID]kept[int64]
	// checks counts the checks of running tasks begun: an entry of
	// unreported or begun notes it when it is made, and a check forgets
	// only entries made before its own read of the database began (a read
	// older than an entry may not show its task yet).
	checks uint64
	// suspects are the tasks the last check found held here and in no
	// call, with their tokens.
	suspects map[uuid.UUID]int64
}

func newLedger() *ledger {
	return &ledger{running: map[uuid.UUID]*leased{}, busy: map[uuid.UUID]int{}, unreported: map[uuid.UUID]kept[run.Report]{},
		begun: map[uuid.UUID]kept[int64]{}, suspects: map[uuid.UUID]int64{}}
}

// leased is an attempt running in a call of this process.
type leased struct {
	token  int64
	cancel context.CancelCauseFunc
	// unconfirmed counts the beats since the lease was last renewed (or
	// taken); a lease unconfirmed for a whole TTL has lapsed in the
	// database, or soon will, so the attempt stops (see settle).
	unconfirmed int
}

// kept is a value the ledger keeps about a task (a report, a fencing
// token) and the check count when it was kept (see ledger.checks).
type kept[T any] struct {
	v  T
	at uint64
}

// hold counts a work call on a task in (+1) or out (-1).
func (l *ledger) hold(task uuid.UUID, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy[task] += n; l.busy[task] <= 0 {
		delete(l.busy, task)
	}
}

// begin records that a call runs the attempt of task with token, and
// returns its entry; nil when the attempt runs or ran in this process (a
// River job for it came again, and found it started here), or a later
// attempt of the task began here since (tokens only grow): it runs once.
func (l *ledger) begin(task uuid.UUID, token int64, cancel context.CancelCauseFunc) *leased {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k, ok := l.begun[task]; ok && k.v >= token {
		return nil
	}
	l.begun[task] = kept[int64]{v: token, at: l.checks}
	e := &leased{token: token, cancel: cancel}
	l.running[task] = e
	return e
}

// end records that the call of entry e (from begin) is over. Only e's own
// entry goes: an older attempt's call that ends late leaves a newer
// attempt of the same task in place.
func (l *ledger) end(task uuid.UUID, e *leased) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[task] == e {
		delete(l.running, task)
	}
}

// keepUnreported keeps a report that failed, for the orphan check; a
// report of an older attempt never replaces a newer one's.
func (l *ledger) keepUnreported(r run.Report) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k, ok := l.unreported[r.TaskID]; ok && k.v.FencingToken > r.FencingToken {
		return
	}
	l.unreported[r.TaskID] = kept[run.Report]{v: r, at: l.checks}
}

// reported forgets a kept report once it was delivered.
func (l *ledger) reported(r run.Report) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k, ok := l.unreported[r.TaskID]; ok && k.v.FencingToken == r.FencingToken {
		delete(l.unreported, r.TaskID)
	}
}

// allUnreported are the kept reports (for a last try at shutdown).
func (l *ledger) allUnreported() []run.Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]run.Report, 0, len(l.unreported))
	for _, k := range l.unreported {
		out = append(out, k.v)
	}
	return out
}

// suspect makes the next check report task's attempt at once (its orphan
// report failed).
func (l *ledger) suspect(task uuid.UUID, token int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.suspects[task] = token
}

// snapshot returns the attempts running now, each one more beat
// unconfirmed: the ones a renewal about to be sent confirms.
func (l *ledger) snapshot() map[uuid.UUID]*leased {
	l.mu.Lock()
	defer l.mu.Unlock()
	asked := make(map[uuid.UUID]*leased, len(l.running))
	for id, e := range l.running {
		e.unconfirmed++
		asked[id] = e
	}
	return asked
}

// beginCheck counts a check of running tasks begun, before its read of
// the database, and returns its number.
func (l *ledger) beginCheck() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checks++
	return l.checks
}

// settle decides about the attempts asked about (a snapshot) after a
// renewal: a renewal that succeeded (renewed) confirms them; when the
// database was read (ours: the task ids and tokens it says run here), an
// attempt missing from it or under another token is no longer this
// worker's; an attempt unconfirmed for beats renewals has lapsed. It
// returns the entries to cancel. Only the attempts asked about are
// decided: one that began after the snapshot is left alone, as is an
// attempt of the same task that replaced the one asked about.
func (l *ledger) settle(asked map[uuid.UUID]*leased, ours map[uuid.UUID]int64, renewed bool, beats int) []*leased {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*leased
	for id, e := range asked {
		if renewed {
			e.unconfirmed = 0
		}
		if l.running[id] != e {
			continue
		}
		lost := false
		if ours != nil {
			if tok, ok := ours[id]; !ok || tok != e.token {
				lost = true
			}
		}
		if lost || e.unconfirmed >= beats {
			out = append(out, e)
		}
	}
	return out
}

// orphans are the attempts the database says this worker runs (held:
// task and token) while no work call of this worker holds their task, at
// this check and at the one before with the same fencing token: their
// report was lost (it failed past its retries, or the call panicked). The
// worker's lease is their lease, and it does not lapse while the worker
// lives, so the reaper never sees them: the worker reports them itself,
// with the report that failed if it kept one, else with lost(task,
// token). Two checks apart (a beat), an attempt whose report was
// committing at the first check is no longer held at the second; an
// orphan's report races nothing, and a stale one is rejected by the
// fencing token anyway.
//
// held was read by check number check (see beginCheck).
func (l *ledger) orphans(held map[uuid.UUID]int64, check uint64, lost func(task uuid.UUID, token int64) run.Report) []run.Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	suspects := map[uuid.UUID]int64{}
	var out []run.Report
	for id, token := range held {
		if l.busy[id] > 0 {
			continue
		}
		if k, ok := l.begun[id]; ok && k.v >= token && k.at >= check {
			continue // this attempt or a later one began here since this check's read: the read is stale
		}
		if tok, ok := l.suspects[id]; !ok || tok != token {
			suspects[id] = token
			continue
		}
		k, isKept := l.unreported[id]
		r := k.v
		if !isKept || r.FencingToken != token {
			r = lost(id, token)
		}
		out = append(out, r)
		// Reported here: a River job coming again for it must not run it.
		l.begun[id] = kept[int64]{v: token, at: l.checks}
	}
	l.suspects = suspects
	// Forget what the database no longer holds here, as of this check's
	// read: entries made since it began may be of tasks it did not see.
	for id, k := range l.unreported {
		if tok, ok := held[id]; k.at < check && (!ok || tok != k.v.FencingToken) {
			delete(l.unreported, id) // reported, or moved on
		}
	}
	for id, k := range l.begun {
		if tok, ok := held[id]; k.at < check && (!ok || tok != k.v) && l.busy[id] == 0 {
			delete(l.begun, id) // reported, or moved on
		}
	}
	return out
}
