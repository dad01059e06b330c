package lifecycle

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// Shape is what deciding an attempt's end needs to know of its step and
// run, read from the job version the run pinned.
type Shape struct {
	Attempt      int // the attempt's number, 1 for the first
	MaxAttempts  int
	Initial, Max time.Duration // the retry backoff's bounds
	HasChildren  bool          // some step needs this one
	SingleTask   bool          // the run has one task
	HoldsRuns    bool          // the job holds runs back (dag.JobSpec.HoldsRuns)
	Root         bool          // the step needs none: it starts when its run does
	Item         bool          // an item of a fan-out: its end is counted in its group
	// SkipOnTimeout: a parked step whose timeout skips it (on_timeout:
	// skip) rather than failing it.
	SkipOnTimeout bool
}

// Ending is how an attempt ended, as far as its task's life cares.
type Ending struct {
	OK        bool
	Retryable bool
	// LeaseLapsed: the attempt was ended for it, its lease lapsed (the
	// reaper, or the worker that lost it); it applies only while the lease
	// is still lapsed, and its retry is not delayed.
	LeaseLapsed bool
	// TimedOut: the attempt ended at its timeout (a parked step's: its
	// wait, its approval).
	TimedOut bool
}

// Finish is what an ended attempt does to its task, its task's
// neighbours and its run.
type Finish struct {
	Task    TaskStatus     // succeeded, retrying, dead_lettered or skipped
	Outcome AttemptOutcome // the attempt's record
	// RetryIn is the backoff before the next attempt (Task retrying).
	RetryIn time.Duration
	// NextAttempt is the number of the retry (Task retrying).
	NextAttempt int
	// ReleaseChildren: count this parent done for its waiting children and
	// release those whose count reaches zero.
	ReleaseChildren bool
	// FailDescendants: the waiting all_success descendants fail upstream;
	// all_done children count this parent as done.
	FailDescendants bool
	// SkipDescendants: the task was skipped (a parked step's timeout with
	// on_timeout: skip): its waiting all_success descendants are skipped;
	// others count it as done.
	SkipDescendants bool
	// Run is the run's end when the run has one task ("" when it goes on:
	// a retry). A run of several tasks ends when its last open task does,
	// derived from the counts of its tasks (store FinishRunIfDone).
	Run       RunStatus
	RunReason string
	// MayEndRun: the run may end with this task (any end but a retry).
	MayEndRun bool
	// PromoteHeld: when the run ends, its job's run held by overlap: queue
	// starts.
	PromoteHeld bool
}

// FinishAttempt decides what an ended attempt means: success releases the
// children; a retryable failure with attempts left retries after a
// backoff (none after a lapsed lease: the step did not fail, its worker
// went away); any other failure dead-letters the task and fails its
// descendants; a parked step's timeout with on_timeout: skip skips the
// task (its attempt failed) and skips its all_success descendants.
// jitter(n) is a number in [0, n) (rand.Int64N; tests give their own).
func FinishAttempt(s Shape, e Ending, jitter func(int64) int64) Finish {
	var f Finish
	switch {
	case e.OK:
		f.Task, f.Outcome = TaskSucceeded, AttemptSucceeded
		f.ReleaseChildren = s.HasChildren
	case e.TimedOut && s.SkipOnTimeout:
		f.Task, f.Outcome = TaskSkipped, AttemptFailed
		f.SkipDescendants = s.HasChildren
	case e.Retryable && s.Attempt < s.MaxAttempts:
		f.Task, f.Outcome = TaskRetrying, AttemptFailed
		f.NextAttempt = s.Attempt + 1
		if !e.LeaseLapsed {
			f.RetryIn = Backoff(s.Initial, s.Max, s.Attempt, jitter)
		}
		return f
	default:
		f.Task, f.Outcome = TaskDeadLettered, AttemptFailed
		f.FailDescendants = s.HasChildren
	}
	f.MayEndRun, f.PromoteHeld = true, s.HoldsRuns
	if s.SingleTask {
		f.Run = RunSucceeded
		if f.Task == TaskDeadLettered {
			f.Run, f.RunReason = RunFailed, DeadLetteredReason(1)
		}
	}
	return f
}

// GroupEnded is how a fan-out's group ends once all its total items
// ended: succeeded when at least need of them succeeded (need is its
// step's min_success, dag.MinSuccess.Need), else dead-lettered, its
// reason naming the counts.
func GroupEnded(total, succeeded, need int) (TaskStatus, string) {
	if succeeded >= need {
		return TaskSucceeded, ""
	}
	return TaskDeadLettered, fmt.Sprintf("%d of %d items succeeded; min_success needs %d", succeeded, total, need)
}

// Cascades is whether an ended attempt may settle many tasks besides its
// own: a failure for good, or a skip, of a step that others need.
func Cascades(s Shape, e Ending) bool {
	f := FinishAttempt(s, e, noJitter)
	return f.FailDescendants || f.SkipDescendants
}

func noJitter(int64) int64 { return 0 }

// DeadLetteredReason is the reason of a run that ends with n tasks
// dead-lettered (store FinishRunIfDone writes the same words).
func DeadLetteredReason(n int) string { return strconv.Itoa(n) + " task(s) dead-lettered" }

// Backoff is the wait before retry number n (1 for the first retry):
// exponential from initial, capped at max, with full jitter above initial
// (jitter(n) is in [0, n); nil: rand.Int64N).
func Backoff(initial, maxWait time.Duration, n int, jitter func(int64) int64) time.Duration {
	if jitter == nil {
		jitter = rand.Int64N
	}
	ceil := initial
	for i := 1; i < n && ceil < maxWait; i++ {
		ceil *= 2
	}
	ceil = min(ceil, maxWait)
	if ceil <= initial {
		return initial
	}
	return initial + time.Duration(jitter(int64(ceil-initial)))
}
