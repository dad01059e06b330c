package lifecycle

import (
	"fmt"
	"strings"

	"github.com/orrery-dev/orrery/dag"
)

// TaskStatus is where a task is in its life (the CHECK on tasks.status).
type TaskStatus string

// Task statuses. docs/lifecycle.md draws the transitions between them.
const (
	// TaskWaiting: a parent has not finished, or the task's run is held
	// back by overlap: queue.
	TaskWaiting TaskStatus = "waiting"
	// TaskQueued: released for its next attempt; it waits for admission,
	// then for a worker.
	TaskQueued TaskStatus = "queued"
	// TaskRunning: an attempt started on a worker, whose lease is the
	// task's.
	TaskRunning TaskStatus = "running"
	// TaskRetrying: the last attempt failed and may be retried after its
	// backoff (ready_at); then as queued.
	TaskRetrying TaskStatus = "retrying"
	// TaskSucceeded: the last attempt succeeded.
	TaskSucceeded TaskStatus = "succeeded"
	// TaskFailed is allowed by the schema and never written: a failure for
	// good is TaskDeadLettered.
	TaskFailed TaskStatus = "failed"
	// TaskUpstreamFailed: an all_success ancestor failed for good.
	TaskUpstreamFailed TaskStatus = "upstream_failed"
	// TaskCancelled: the task's run was cancelled.
	TaskCancelled TaskStatus = "cancelled"
	// TaskDeadLettered: the step failed for good (not retryable, or out of
	// attempts, or its condition could not be evaluated); a replay may
	// queue it again.
	TaskDeadLettered TaskStatus = "dead_lettered"
	// TaskSkipped: its condition (when) was false, or an all_success
	// parent was skipped; it counts as ended without failing.
	TaskSkipped TaskStatus = "skipped"
	// TaskExpanded: a fan-out's group whose items exist and have not all
	// ended; it holds no slot, worker or lease (its items do).
	TaskExpanded TaskStatus = "expanded"
)

// TaskStatuses are all task statuses, in the order of a task's life.
var TaskStatuses = []TaskStatus{TaskWaiting, TaskQueued, TaskRunning, TaskRetrying, TaskExpanded, TaskSucceeded, TaskSkipped, TaskFailed, TaskUpstreamFailed, TaskCancelled, TaskDeadLettered}

// Open is whether a task in s may still change without a replay: its run
// is not done while it holds one.
func (s TaskStatus) Open() bool {
	switch s {
	case TaskWaiting, TaskQueued, TaskRunning, TaskRetrying, TaskExpanded:
		return true
	}
	return false
}

// WaitsForWorker is whether a task in s waits for admission or for a worker
// to start its next attempt.
func (s TaskStatus) WaitsForWorker() bool { return s == TaskQueued || s == TaskRetrying }

// RunStatus is where a run is in its life (the CHECK on runs.status).
type RunStatus string

// Run statuses.
const (
	// RunQueued: held back by overlap: queue until the job's active run
	// ends; its tasks are all waiting.
	RunQueued RunStatus = "queued"
	// RunPending: created with its tasks; no attempt has started.
	RunPending RunStatus = "pending"
	// RunRunning: an attempt has started, or a replay reopened the run.
	RunRunning RunStatus = "running"
	// RunSucceeded: every task succeeded or was skipped.
	RunSucceeded RunStatus = "succeeded"
	// RunFailed: a task failed for good (dead-lettered), or tasks failed
	// upstream with none cancelled.
	RunFailed RunStatus = "failed"
	// RunSkipped: a record without tasks (misfire, overlap, storage quota).
	RunSkipped RunStatus = "skipped"
	// RunCancelled: cancelled, through the API or by cancel_previous.
	RunCancelled RunStatus = "cancelled"
	// RunDeadLettered is how versions before the run status "failed"
	// covered dead letters ended a run whose task was dead-lettered. It is
	// written no more; runs of those versions keep it (a rolling upgrade
	// may still write it), and it reads as RunFailed (Ended).
	RunDeadLettered RunStatus = "dead_lettered"
)

// RunStatuses are all run statuses.
var RunStatuses = []RunStatus{RunQueued, RunPending, RunRunning, RunSucceeded, RunFailed, RunSkipped, RunCancelled, RunDeadLettered}

// Ended is s as a run ends today: RunDeadLettered is RunFailed.
func (s RunStatus) Ended() RunStatus {
	if s == RunDeadLettered {
		return RunFailed
	}
	return s
}

// Active is whether a run in s counts for its job's overlap policy.
func (s RunStatus) Active() bool { return s == RunQueued || s == RunPending || s == RunRunning }

// Replayable is whether a run in s may have dead letters to replay (and is
// reopened by the replay).
func (s RunStatus) Replayable() bool { return s == RunDeadLettered || s == RunFailed }

// ParseRunStatus checks a run status given by a user.
func ParseRunStatus(s string) (RunStatus, error) {
	for _, st := range RunStatuses {
		if string(st) == s {
			return st, nil
		}
	}
	names := make([]string, len(RunStatuses))
	for i, st := range RunStatuses {
		names[i] = string(st)
	}
	return "", fmt.Errorf("%q is not one of %s", s, strings.Join(names, ", "))
}

// AttemptOutcome is how an attempt ended (attempts.outcome).
type AttemptOutcome string

// Attempt outcomes.
const (
	AttemptRunning   AttemptOutcome = "running"
	AttemptSucceeded AttemptOutcome = "succeeded"
	AttemptFailed    AttemptOutcome = "failed"
)

// Trigger is what started a run (the CHECK on runs.trigger).
type Trigger string

// Triggers.
const (
	TriggerSchedule Trigger = "schedule" // a due instant of the job's schedule
	TriggerBackfill Trigger = "backfill" // a missed instant fired by misfire: backfill
	TriggerManual   Trigger = "manual"   // started through the API
	TriggerUpstream Trigger = "upstream" // started by the end of a run of another job (schedule.after)
	TriggerParent   Trigger = "parent"   // started by a step of another run that runs its job (run.job)
	TriggerEvent    Trigger = "event"    // started by an event published to its tenant (schedule.event)
	TriggerReplay   Trigger = "replay"   // allowed by the schema, not written today
)

// Triggers are the triggers runs are written with (TriggerReplay is not).
var Triggers = []Trigger{TriggerSchedule, TriggerBackfill, TriggerManual, TriggerUpstream, TriggerParent, TriggerEvent}

// Scheduled is whether runs of trigger t fire at an instant of the
// schedule (their lateness is the firing's, not a user's).
func (t Trigger) Scheduled() bool { return t == TriggerSchedule || t == TriggerBackfill }

// ParentEffect is what a parent's end does to a waiting child.
type ParentEffect int

// Effects of a parent's end.
const (
	// CountParent: the parent counts as done; the child runs once every
	// parent is counted.
	CountParent ParentEffect = iota
	// FailChild: the child fails upstream (upstream_failed), and so on
	// below it.
	FailChild
	// SkipChild: the child is skipped, and so on below it.
	SkipChild
)

// ParentEnded is what a parent that ended in status does to a waiting
// child with the trigger rule: all_success runs on parents that all
// succeeded (a skipped one skips it, a failed one fails it upstream);
// none_failed runs when none failed (skipped ones count as done); all_done
// runs once all ended, however.
func ParentEnded(status TaskStatus, rule dag.TriggerRule) ParentEffect {
	switch {
	case status == TaskSucceeded || rule == dag.TriggerAllDone:
		return CountParent
	case status == TaskSkipped && rule == dag.TriggerNoneFailed:
		return CountParent
	case status == TaskSkipped:
		return SkipChild
	}
	return FailChild
}
