package lifecycle

import (
	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
)

// AcceptsReplay is whether a dead letter of a run in s may be replayed: a
// run that goes on (pending, its other tasks still running; or running,
// reopened by an earlier replay) or that ended with dead letters; not once
// the run is cancelled (its dead letters are history then).
func (s RunStatus) AcceptsReplay() bool {
	return s == RunPending || s == RunRunning || s == RunFailed || s == RunDeadLettered
}

// GraphTask is one task of a run as a replay sees it.
type GraphTask struct {
	ID               uuid.UUID
	Status           TaskStatus
	Rule             dag.TriggerRule
	ParentsRemaining int
	Parents          []uuid.UUID
}

// ReplayPlan is what replaying dead letters of one run does to its tasks.
type ReplayPlan struct {
	// Queue are the dead letters that go back in line (dead_lettered to
	// queued), in the order asked.
	Queue []uuid.UUID
	// Wait are the tasks that wait (again) for their parents, with the
	// number of parents they wait for: descendants revived from
	// upstream_failed, and waiting descendants whose count the replay
	// changed (an all_done child counted the failed parent as done; it
	// must wait for its new attempt).
	Wait map[uuid.UUID]int
	// Release are revived tasks with nothing left to wait for.
	Release []uuid.UUID
	// Skip are revived tasks that a skipped parent skips (all_success).
	Skip []uuid.UUID
	// ReopenRun: the run was finished and opens again (stored running).
	ReopenRun bool
}

// Replay decides what replaying the dead letters replay (ids of tasks of
// one run; those that are not dead-lettered are left out) does to the run.
// The statuses of the replayed tasks' descendants are derived afresh, in
// the order of the graph, as if the replayed tasks had never failed: each
// waits for its parents that did not end yet, unless an ended parent
// fails it upstream or skips it by its trigger rule (ParentEnded).
// Nothing else changes: tasks that ran keep their end, and a task that
// still has another failed ancestor stays upstream_failed.
func Replay(run RunStatus, tasks []GraphTask, replay []uuid.UUID) ReplayPlan {
	var p ReplayPlan
	if !run.AcceptsReplay() {
		return p
	}
	byID := make(map[uuid.UUID]*GraphTask, len(tasks))
	children := make(map[uuid.UUID][]uuid.UUID, len(tasks))
	for i := range tasks {
		t := &tasks[i]
		byID[t.ID] = t
		for _, parent := range t.Parents {
			children[parent] = append(children[parent], t.ID)
		}
	}
	status := make(map[uuid.UUID]TaskStatus, len(tasks))
	for _, t := range tasks {
		status[t.ID] = t.Status
	}
	for _, id := range replay {
		if t := byID[id]; t != nil && status[id] == TaskDeadLettered {
			status[id] = TaskQueued
			p.Queue = append(p.Queue, id)
		}
	}
	if len(p.Queue) == 0 {
		return p
	}
	p.ReopenRun = run == RunDeadLettered || run == RunFailed

	// The replayed tasks' descendants, in an order where every task comes
	// after its parents (Kahn's algorithm over the descendants only).
	below := map[uuid.UUID]bool{}
	stack := append([]uuid.UUID(nil), p.Queue...)
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range children[id] {
			if !below[c] {
				below[c] = true
				stack = append(stack, c)
			}
		}
	}
	indegree := make(map[uuid.UUID]int, len(below))
	for id := range below {
		for _, parent := range byID[id].Parents {
			if below[parent] {
				indegree[id]++
			}
		}
	}
	var ready []uuid.UUID
	for _, t := range tasks { // in the run's order, for a stable plan
		if below[t.ID] && indegree[t.ID] == 0 {
			ready = append(ready, t.ID)
		}
	}
	p.Wait = map[uuid.UUID]int{}
	for len(ready) > 0 {
		id := ready[0]
		ready = ready[1:]
		for _, c := range children[id] {
			if indegree[c]--; indegree[c] == 0 {
				ready = append(ready, c)
			}
		}
		t := byID[id]
		if st := status[id]; st != TaskWaiting && st != TaskUpstreamFailed {
			continue // it ran, or runs: its end stands
		}
		failed, skipped, remaining := false, false, 0
		for _, parent := range t.Parents {
			st := status[parent]
			if st.Open() {
				remaining++
				continue
			}
			switch ParentEnded(st, t.Rule) {
			case FailChild:
				failed = true
			case SkipChild:
				skipped = true
			}
		}
		switch {
		case failed:
			status[id] = TaskUpstreamFailed
			continue
		case skipped:
			status[id] = TaskSkipped
			p.Skip = append(p.Skip, id)
			continue
		}
		status[id] = TaskWaiting
		switch {
		case remaining == 0:
			status[id] = TaskQueued
			p.Release = append(p.Release, id)
		case t.Status != TaskWaiting || t.ParentsRemaining != remaining:
			p.Wait[id] = remaining
		}
	}
	return p
}

// AcceptsRetry is whether a run in s may be retried from where it failed:
// it ended, and not as it should (failed, dead-lettered or cancelled).
func (s RunStatus) AcceptsRetry() bool {
	return s == RunFailed || s == RunDeadLettered || s == RunCancelled
}

// RetryPlan is what retrying a finished run from where it failed does to
// its tasks.
type RetryPlan struct {
	// Wait are the tasks that run again once their parents end, with the
	// number of parents they wait for.
	Wait map[uuid.UUID]int
	// Release are the tasks that run again at once (their conditions, if
	// any, decided again).
	Release []uuid.UUID
	// Skip are the tasks to run again that a kept skipped parent skips.
	Skip []uuid.UUID
}

// Retry decides what retrying a run in status run (AcceptsRetry) does:
// every task that succeeded or was skipped keeps its end (and its output);
// every other one (failed for good, failed upstream, cancelled, never
// started) runs again, after the ones of its parents that run again,
// deriving its count afresh in the order of the graph (parents first,
// whatever the order of tasks).
func Retry(run RunStatus, tasks []GraphTask) RetryPlan {
	p := RetryPlan{Wait: map[uuid.UUID]int{}}
	if !run.AcceptsRetry() {
		return p
	}
	status := make(map[uuid.UUID]TaskStatus, len(tasks))
	for _, t := range tasks {
		status[t.ID] = t.Status
	}
	for _, t := range graphOrder(tasks) {
		if st := status[t.ID]; st == TaskSucceeded || st == TaskSkipped {
			continue
		}
		skipped, remaining := false, 0
		for _, parent := range t.Parents {
			st := status[parent]
			if st.Open() {
				remaining++ // runs again
				continue
			}
			if ParentEnded(st, t.Rule) == SkipChild {
				skipped = true
			}
		}
		switch {
		case skipped:
			status[t.ID] = TaskSkipped
			p.Skip = append(p.Skip, t.ID)
		case remaining == 0:
			status[t.ID] = TaskQueued
			p.Release = append(p.Release, t.ID)
		default:
			status[t.ID] = TaskWaiting
			p.Wait[t.ID] = remaining
		}
	}
	return p
}

// AcceptsRerun is whether a run in s may run again from the start: it
// ended, succeeded or not (a backfill's redo all).
func (s RunStatus) AcceptsRerun() bool { return s.AcceptsRetry() || s == RunSucceeded }

// Rerun decides what running a run in status run (AcceptsRerun) again from
// the start does: every task runs again, succeeded and skipped ones too
// (their new ends supersede their old ones); its roots at once (their
// conditions decided again), every other task once all its parents end
// again. Attempt numbers go on, as for Retry.
func Rerun(run RunStatus, tasks []GraphTask) RetryPlan {
	p := RetryPlan{Wait: map[uuid.UUID]int{}}
	if !run.AcceptsRerun() {
		return p
	}
	for _, t := range graphOrder(tasks) {
		if len(t.Parents) == 0 {
			p.Release = append(p.Release, t.ID)
		} else {
			p.Wait[t.ID] = len(t.Parents)
		}
	}
	return p
}

// graphOrder is tasks in an order where every task comes after its
// parents (Kahn's algorithm; ties in the given order).
func graphOrder(tasks []GraphTask) []GraphTask {
	byID := make(map[uuid.UUID]int, len(tasks))
	for i, t := range tasks {
		byID[t.ID] = i
	}
	indegree := make([]int, len(tasks))
	children := make([][]int, len(tasks))
	for i, t := range tasks {
		for _, parent := range t.Parents {
			if k, ok := byID[parent]; ok {
				indegree[i]++
				children[k] = append(children[k], i)
			}
		}
	}
	var ready []int
	for i := range tasks {
		if indegree[i] == 0 {
			ready = append(ready, i)
		}
	}
	out := make([]GraphTask, 0, len(tasks))
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		out = append(out, tasks[i])
		for _, c := range children[i] {
			if indegree[c]--; indegree[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	return out
}
