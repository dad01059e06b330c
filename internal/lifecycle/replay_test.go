package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
)

// graph builds a run from lines "name status [rule] [remaining] <- parents".
func graph(lines ...string) ([]GraphTask, map[string]uuid.UUID) {
	ids := map[string]uuid.UUID{}
	var tasks []GraphTask
	for i, l := range lines {
		head, parents, _ := strings.Cut(l, "<-")
		f := strings.Fields(head)
		id := uuid.UUID{byte(i + 1)}
		ids[f[0]] = id
		t := GraphTask{ID: id, Status: TaskStatus(f[1]), Rule: dag.TriggerAllSuccess}
		for _, x := range f[2:] {
			if x == "all_done" || x == "none_failed" {
				t.Rule = dag.TriggerRule(x)
			} else {
				fmt.Sscan(x, &t.ParentsRemaining)
			}
		}
		for _, p := range strings.Fields(parents) {
			t.Parents = append(t.Parents, ids[p])
		}
		tasks = append(tasks, t)
	}
	return tasks, ids
}

func TestReplay(t *testing.T) {
	tests := []struct {
		name   string
		run    RunStatus
		tasks  []string
		replay []string
		want   string // queue, wait (name=remaining), release, reopen
	}{
		{"a chain revives below the dead letter", RunDeadLettered,
			[]string{"a succeeded", "b dead_lettered <- a", "c upstream_failed 1 <- b", "d upstream_failed 1 <- c"},
			[]string{"b"}, "queue b; wait c=1 d=1; release -; reopen"},
		{"a parent that succeeded while the child was upstream_failed is not waited for", RunDeadLettered,
			// c needs a and b; a failed first, b succeeded afterwards (never counted)
			[]string{"a dead_lettered", "b succeeded", "c upstream_failed 2 <- a b"},
			[]string{"a"}, "queue a; wait c=1; release -; reopen"},
		{"an all_done child counted the failed parent; it waits for the new attempt", RunPending,
			[]string{"a dead_lettered", "b running", "c waiting all_done 1 <- a b"},
			[]string{"a"}, "queue a; wait c=2; release -; running"},
		{"an all_done child that ran keeps its end", RunDeadLettered,
			[]string{"a dead_lettered", "c succeeded all_done <- a", "d upstream_failed 1 <- a"},
			[]string{"a"}, "queue a; wait d=1; release -; reopen"},
		{"another failed parent keeps the child upstream_failed", RunDeadLettered,
			[]string{"a dead_lettered", "b dead_lettered", "c upstream_failed 2 <- a b", "d upstream_failed 1 <- c"},
			[]string{"a"}, "queue a; wait -; release -; reopen"},
		{"both failed parents replayed", RunDeadLettered,
			[]string{"a dead_lettered", "b dead_lettered", "c upstream_failed 2 <- a b", "d upstream_failed 1 <- c"},
			[]string{"a", "b"}, "queue a b; wait c=2 d=1; release -; reopen"},
		{"a diamond below the replayed task", RunDeadLettered,
			[]string{"a dead_lettered", "b upstream_failed <- a", "c upstream_failed <- a", "d upstream_failed <- b c"},
			[]string{"a"}, "queue a; wait b=1 c=1 d=2; release -; reopen"},
		{"a cancelled run replays nothing", RunCancelled,
			[]string{"a dead_lettered", "b cancelled <- a"},
			[]string{"a"}, "queue -; wait -; release -; running"},
		{"only dead letters are replayed", RunDeadLettered,
			[]string{"a succeeded", "b dead_lettered <- a"},
			[]string{"a", "b"}, "queue b; wait -; release -; reopen"},
		{"a skipped parent skips a revived all_success child, and its child", RunDeadLettered,
			[]string{"a dead_lettered", "b skipped", "c upstream_failed 2 <- a b", "d upstream_failed 1 <- c", "e upstream_failed all_done 1 <- c"},
			[]string{"a"}, "queue a; wait -; release e; skip c d; reopen"},
		{"a skipped parent counts as done for none_failed", RunDeadLettered,
			[]string{"a dead_lettered", "b skipped", "c upstream_failed none_failed 2 <- a b"},
			[]string{"a"}, "queue a; wait c=1; release -; skip -; reopen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tasks, ids := graph(tt.tasks...)
			names := map[uuid.UUID]string{}
			for n, id := range ids {
				names[id] = n
			}
			var replay []uuid.UUID
			for _, n := range tt.replay {
				replay = append(replay, ids[n])
			}
			p := Replay(tt.run, tasks, replay)
			list := func(xs []uuid.UUID) string {
				var out []string
				for _, x := range xs {
					out = append(out, names[x])
				}
				if len(out) == 0 {
					return "-"
				}
				return strings.Join(out, " ")
			}
			var wait []string
			for id, n := range p.Wait {
				wait = append(wait, fmt.Sprintf("%s=%d", names[id], n))
			}
			slices.Sort(wait)
			if len(wait) == 0 {
				wait = []string{"-"}
			}
			reopen := "running"
			if p.ReopenRun {
				reopen = "reopen"
			}
			got := fmt.Sprintf("queue %s; wait %s; release %s; %s", list(p.Queue), strings.Join(wait, " "), list(p.Release), reopen)
			if len(p.Skip) > 0 || strings.Contains(tt.want, "skip") {
				got = fmt.Sprintf("queue %s; wait %s; release %s; skip %s; %s", list(p.Queue), strings.Join(wait, " "), list(p.Release), list(p.Skip), reopen)
			}
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestParentEnded(t *testing.T) {
	rules := []dag.TriggerRule{dag.TriggerAllSuccess, dag.TriggerNoneFailed, dag.TriggerAllDone}
	want := map[TaskStatus][3]ParentEffect{ // by rule, in the order above
		TaskSucceeded:      {CountParent, CountParent, CountParent},
		TaskSkipped:        {SkipChild, CountParent, CountParent},
		TaskDeadLettered:   {FailChild, FailChild, CountParent},
		TaskUpstreamFailed: {FailChild, FailChild, CountParent},
	}
	for status, effects := range want {
		for i, rule := range rules {
			if got := ParentEnded(status, rule); got != effects[i] {
				t.Errorf("ParentEnded(%s, %s) = %d, want %d", status, rule, got, effects[i])
			}
		}
	}
}

func TestRetry(t *testing.T) {
	tests := []struct {
		name  string
		run   RunStatus
		tasks []string
		want  string                                 // wait (name=remaining), release, skip
		plan  func(RunStatus, []GraphTask) RetryPlan // Retry when nil
	}{
		{"from the dead letter, below it waiting", RunDeadLettered,
			[]string{"a succeeded", "b dead_lettered <- a", "c upstream_failed 1 <- b", "d succeeded all_done <- b"},
			"wait c=1; release b; skip -", nil},
		{"a cancelled run: what never started runs, what succeeded stays", RunCancelled,
			[]string{"a succeeded", "b cancelled <- a", "c cancelled 1 <- b", "e cancelled"},
			"wait c=1; release e b; skip -", nil},
		{"a kept skipped parent skips an all_success task, not a none_failed one", RunCancelled,
			[]string{"a skipped", "b cancelled 1 <- a", "c cancelled none_failed 1 <- a"},
			"wait -; release c; skip b", nil},
		{"a run that succeeded is not retried", RunSucceeded,
			[]string{"a succeeded"}, "wait -; release -; skip -", nil},
		{"a rerun runs every task again, after all its parents", RunSucceeded,
			[]string{"c succeeded <- a b", "a succeeded", "b skipped <- a", "d succeeded"},
			"wait b=1 c=2; release a d; skip -", Rerun},
		{"a rerun of a failed run", RunDeadLettered,
			[]string{"a succeeded", "b dead_lettered <- a", "c upstream_failed 1 <- b"},
			"wait b=1 c=1; release a; skip -", Rerun},
		{"a run that goes on is not rerun", RunRunning,
			[]string{"a succeeded", "b queued <- a"}, "wait -; release -; skip -", Rerun},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tasks, ids := graph(tt.tasks...)
			names := map[uuid.UUID]string{}
			for n, id := range ids {
				names[id] = n
			}
			plan := tt.plan
			if plan == nil {
				plan = Retry
			}
			p := plan(tt.run, tasks)
			list := func(xs []uuid.UUID) string {
				var out []string
				for _, x := range xs {
					out = append(out, names[x])
				}
				if len(out) == 0 {
					return "-"
				}
				return strings.Join(out, " ")
			}
			var wait []string
			for id, n := range p.Wait {
				wait = append(wait, fmt.Sprintf("%s=%d", names[id], n))
			}
			slices.Sort(wait)
			if len(wait) == 0 {
				wait = []string{"-"}
			}
			if got := fmt.Sprintf("wait %s; release %s; skip %s", strings.Join(wait, " "), list(p.Release), list(p.Skip)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestRetryInGraphOrder: a step listed before the step it needs (the
// spec's order, which a run's tasks keep) still waits for it.
func TestRetryInGraphOrder(t *testing.T) {
	a, b := uuid.UUID{1}, uuid.UUID{2}
	p := Retry(RunDeadLettered, []GraphTask{
		{ID: b, Status: TaskUpstreamFailed, Rule: dag.TriggerAllSuccess, ParentsRemaining: 1, Parents: []uuid.UUID{a}},
		{ID: a, Status: TaskDeadLettered, Rule: dag.TriggerAllSuccess},
	})
	if len(p.Release) != 1 || p.Release[0] != a || p.Wait[b] != 1 {
		t.Fatalf("plan %+v: want a released, b waiting for it", p)
	}
}
