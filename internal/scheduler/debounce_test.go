package scheduler_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/event"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// A job's debounce collapses the triggers of one key into one run, with
// the last one's params, started no sooner than its period after the
// last (and no later than max_wait after the first); another key's
// triggers make their own run; a trigger after the run started makes a
// new one; events are debounced as triggers are; the job's overlap
// policy decides the run when it starts; a cancelled debounced run takes
// no more triggers; a key that does not evaluate fails the run naming it;
// a trigger that ignores the overlap policy is not debounced.
func TestDebounceCollapsesTriggers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string][]string{} // the payloads each job's runs ran with
	gates := enginetest.NewGates(t)
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"record": func(ctx context.Context, c executor.Call) error {
			mu.Lock()
			got[c.Job] = append(got[c.Job], string(c.Payload))
			mu.Unlock()
			return nil
		},
		"hold": func(ctx context.Context, c executor.Call) error {
			select {
			case <-gates.Wait("solo"):
			case <-ctx.Done():
			}
			return nil
		},
	})
	startPolicyNode(t, pool, node.Config{})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	period := dag.Duration{Duration: 2 * time.Second}
	params := map[string]dag.Param{"repo": {Type: "string"}, "n": {Type: "string", Default: dag.Payload(`"0"`)}}
	createJob(t, pool, "deploy", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Params: params,
		Debounce: &dag.Debounce{Key: "${{ params.repo }}", Period: period},
		Steps:    []dag.Step{{Name: "work", Run: dag.Executor{Handler: "record"}, Payload: dag.Payload(`"${{ params.repo }}/${{ params.n }}"`)}}})
	createJob(t, pool, "capped", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Params: params,
		Debounce: &dag.Debounce{Period: period, MaxWait: dag.Duration{Duration: 3 * time.Second}},
		Steps:    []dag.Step{{Name: "work", Run: dag.Executor{Handler: "record"}}}})
	createJob(t, pool, "solo", dag.JobSpec{Schedule: never, Overlap: dag.OverlapSkip,
		Debounce: &dag.Debounce{Period: dag.Duration{Duration: time.Second}},
		Steps:    []dag.Step{{Name: "work", Run: dag.Executor{Handler: "hold"}}}})
	createJob(t, pool, "pushed", dag.JobSpec{Schedule: schedule.Spec{Event: &schedule.Event{Type: "push"}},
		Debounce: &dag.Debounce{Key: "${{ event.data.repo }}", Period: dag.Duration{Duration: time.Second}},
		Steps:    []dag.Step{{Name: "work", Run: dag.Executor{Handler: "record"}, Payload: dag.Payload(`"${{ event.data.sha }}"`)}}})
	jobs, _, runs := services(t, pool)
	trigger := func(name string, p map[string]string) *run.Run { t.Helper(); return triggerParams(t, runs, name, p) }
	is := func(id uuid.UUID, status string) { t.Helper(); waitRunStatus(t, pool, id, status) }
	at := func(id uuid.UUID, col string) time.Time {
		t.Helper()
		var v time.Time
		if err := store.Retry(ctx, func() error { return pool.QueryRow(ctx, "SELECT "+col+" FROM runs WHERE id = $1", id).Scan(&v) }); err != nil {
			t.Fatal(err)
		}
		return v
	}

	// Three triggers of repo web, one of api: two runs, web's with the
	// last params, started no sooner than the period after the last.
	w1 := trigger("deploy", map[string]string{"repo": "web", "n": "1"})
	w2 := trigger("deploy", map[string]string{"repo": "web", "n": "2"})
	w3 := trigger("deploy", map[string]string{"repo": "web", "n": "3"})
	a1 := trigger("deploy", map[string]string{"repo": "api", "n": "1"})
	if w1.ID != w2.ID || w2.ID != w3.ID || a1.ID == w1.ID {
		t.Fatalf("runs %s %s %s, api's %s: want web's one run, api's another", w1.ID, w2.ID, w3.ID, a1.ID)
	}
	if !w3.CreatedAt.Equal(w1.CreatedAt) || !w3.ScheduledFor.Equal(w1.ScheduledFor) || w3.DebounceCount != 3 || w3.DebounceAt == nil {
		t.Errorf("a joining trigger's answer: created %s, instant %s, %d triggers, starts %v; the run was created %s",
			w3.CreatedAt, w3.ScheduledFor, w3.DebounceCount, w3.DebounceAt, w1.CreatedAt)
	}
	if w3.Status != "queued" || w3.Reason != "debounce key web: starts 2s after its last trigger" {
		t.Errorf("a debounced run: %s (%s)", w3.Status, w3.Reason)
	}
	due := at(w1.ID, "debounce_at")
	if n := enginetest.Int(t, pool, "SELECT debounce_count FROM runs WHERE id = $1", w1.ID); n != 3 {
		t.Errorf("web's run took %d triggers, want 3", n)
	}
	d, err := runs.Get(ctx, job.Anonymous, w1.ID, run.ItemsPage{})
	if err != nil {
		t.Fatal(err)
	}
	if d.DebounceKey == nil || *d.DebounceKey != "web" || d.DebounceAt == nil || d.DebounceCount != 3 {
		t.Errorf("runs get of a debounced run: key %v at %v count %d", d.DebounceKey, d.DebounceAt, d.DebounceCount)
	}
	is(w1.ID, "succeeded")
	is(a1.ID, "succeeded")
	if released := at(w1.ID, "(SELECT released_at FROM tasks WHERE run_id = runs.id)"); released.Before(due) {
		t.Errorf("web's run started at %s, before its debounce ended at %s", released, due)
	}
	if d, _ := runs.Get(ctx, job.Anonymous, w1.ID, run.ItemsPage{}); d.DebounceAt != nil || d.DebounceCount != 3 {
		t.Errorf("a started debounced run: at %v, count %d", d.DebounceAt, d.DebounceCount)
	}
	mu.Lock()
	if want := []string{`"web/3"`, `"api/1"`}; strings.Join(got["deploy"], " ") != strings.Join(want, " ") &&
		strings.Join(got["deploy"], " ") != `"api/1" "web/3"` {
		t.Errorf("deploy ran %v, want %v", got["deploy"], want)
	}
	mu.Unlock()
	// A trigger after it started makes a new run.
	if w4 := trigger("deploy", map[string]string{"repo": "web", "n": "4"}); w4.ID == w1.ID || w4.Status != "queued" {
		t.Errorf("a trigger after web's run started: %s %s", w4.ID, w4.Status)
	} else {
		is(w4.ID, "succeeded")
	}

	// max_wait: a trigger 1.5 s after the first puts the start off to the
	// first plus 3 s, not to itself plus 2 s.
	c1 := trigger("capped", map[string]string{"repo": "x"})
	time.Sleep(1500 * time.Millisecond)
	if c2 := trigger("capped", map[string]string{"repo": "x"}); c2.ID != c1.ID {
		t.Fatalf("capped: a second run %s", c2.ID)
	}
	if ok := enginetest.Int(t, pool, "SELECT (debounce_at = created_at + interval '3 s')::int FROM runs WHERE id = $1", c1.ID); ok != 1 {
		t.Errorf("capped's start %s is not 3 s after its first trigger (%s)", at(c1.ID, "debounce_at"), at(c1.ID, "created_at"))
	}
	is(c1.ID, "succeeded")

	// The overlap policy decides the run when it starts: solo's run held
	// (a trigger ignoring overlap is not debounced), a debounced one is
	// cancelled by skip when it would start.
	held, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "solo"}, run.TriggerOptions{IgnoreOverlap: true})
	if err != nil || held.Status != "pending" {
		t.Fatalf("a trigger ignoring overlap: %+v (%v)", held, err)
	}
	is(held.ID, "running")
	skipped := trigger("solo", nil)
	if skipped.Status != "queued" {
		t.Fatalf("solo's debounced run %s", skipped.Status)
	}
	is(skipped.ID, "cancelled")
	if r := getRun(t, pool, skipped.ID).Reason; !strings.Contains(r, "skip") {
		t.Errorf("the debounced run its overlap skipped: %q", r)
	}
	// A cancelled debounced run takes no more triggers.
	gone := trigger("solo", nil)
	if _, err := runs.CancelRun(ctx, job.Anonymous, gone.ID, ""); err != nil {
		t.Fatal(err)
	}
	if again := trigger("solo", nil); again.ID == gone.ID {
		t.Errorf("a trigger joined a cancelled debounced run")
	}
	gates.Open("solo")
	is(held.ID, "succeeded")

	// Events: three pushes of one repo, one run, with the last event.
	for i, sha := range []string{"a1", "b2", "c3"} {
		if _, err := event.Publish(ctx, pool, job.DefaultTenant, jobs.Shards(), event.Event{Type: "push", ID: sha,
			Data: []byte(`{"repo": "web", "sha": "` + sha + `", "i": ` + string(rune('0'+i)) + `}`)}); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.WaitFor(t, 30*time.Second, "the pushes' run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["pushed"]) > 0
	})
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE job_id = (SELECT id FROM jobs WHERE name = 'pushed')"); n != 1 {
		t.Errorf("three pushes made %d runs, want 1", n)
	}
	mu.Lock()
	if p := got["pushed"]; len(p) != 1 || p[0] != `"c3"` {
		t.Errorf("the pushes' run ran %v, want the last push's", p)
	}
	mu.Unlock()

	// A key that does not evaluate fails the run naming it.
	if bad := trigger("deploy", map[string]string{"repo": ""}); bad.Status != "failed" || !strings.Contains(bad.Reason, "debounce.key: evaluates to empty text") {
		t.Errorf("an empty key: %s (%s)", bad.Status, bad.Reason)
	}
}
