package scheduler_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

// A job's concurrency keys bound its runs by key: at the limit a new run
// is queued (and started, the oldest first, when a run of its key ends),
// cancelled (cancel_newest), or makes room by cancelling the oldest
// holder (cancel_running); a run of another key does not wait; a key that
// does not evaluate fails the run naming it. Many triggers at once never
// run more than the limit of one key.
func TestConcurrencyKeysBoundRuns(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var mu sync.Mutex
	running, most := map[string]int{}, map[string]int{}
	gates := enginetest.NewGates(t)
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"hold": func(ctx context.Context, c executor.Call) error {
			var p struct{ Customer, Gate string }
			_ = json.Unmarshal(c.Payload, &p)
			k := c.Job + "/" + p.Customer
			mu.Lock()
			running[k]++
			most[k] = max(most[k], running[k])
			mu.Unlock()
			defer func() {
				mu.Lock()
				running[k]--
				mu.Unlock()
			}()
			select {
			case <-gates.Wait(p.Gate):
			case <-ctx.Done():
			}
			return nil
		},
	})
	startPolicyNode(t, pool, node.Config{})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	keyed := func(name string, limit int, on dag.OnLimit) {
		createJob(t, pool, name, dag.JobSpec{Schedule: never,
			Params:      map[string]dag.Param{"customer": {Type: "string"}, "gate": {Type: "string", Default: dag.Payload(`"g"`)}},
			Concurrency: []dag.ConcurrencyLimit{{Key: "customer=${{ params.customer }}", Limit: limit, OnLimit: on}},
			Steps: []dag.Step{{Name: "work", Run: dag.Executor{Handler: "hold"},
				Payload: dag.Payload(`{"customer": "${{ params.customer }}", "gate": "${{ params.gate }}"}`)}}})
	}
	keyed("sync", 1, "")
	keyed("once", 1, dag.OnLimitCancelNewest)
	keyed("latest", 1, dag.OnLimitCancelRunning)
	keyed("pair", 2, "")
	createJob(t, pool, "caller", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "call", Run: dag.Executor{Job: &dag.JobCall{Name: "once", Params: dag.Payload(`{"customer": "1", "gate": "c"}`)}}}}})
	_, _, runs := services(t, pool)
	trigger := func(name, customer, g string) *run.Run {
		t.Helper()
		r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: name}, run.TriggerOptions{
			ParamTexts: map[string]string{"customer": customer, "gate": g}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	is := func(id uuid.UUID, status string) {
		t.Helper()
		enginetest.WaitFor(t, 30*time.Second, "run "+id.String()+" "+status, func() bool { return runStatus(t, pool, id) == status })
	}

	// queue: the second run of customer 1 waits; customer 2's does not.
	a1 := trigger("sync", "1", "a1")
	a2 := trigger("sync", "1", "a2")
	b1 := trigger("sync", "2", "b1")
	if a2.Status != "queued" || a2.Reason != "concurrency key customer=1 1/1" || b1.Status != "pending" {
		t.Fatalf("a2 %s (%s), b1 %s", a2.Status, a2.Reason, b1.Status)
	}
	is(a1.ID, "running")
	is(b1.ID, "running")
	gates.Open("a1")
	is(a1.ID, "succeeded")
	is(a2.ID, "running")
	gates.Open("a2")
	gates.Open("b1")
	is(a2.ID, "succeeded")

	// cancel_newest: the second is written cancelled.
	o1 := trigger("once", "1", "o1")
	o2 := trigger("once", "1", "o2")
	if o2.Status != "cancelled" || !strings.Contains(o2.Reason, "cancel_newest (key customer=1 at its limit 1/1)") {
		t.Errorf("o2 %s (%s)", o2.Status, o2.Reason)
	}
	// A child run written cancelled by its key ends its parent's step.
	caller, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "caller"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	is(caller.ID, "failed")
	gates.Open("o1")
	is(o1.ID, "succeeded")

	// cancel_running: the first makes room for the second.
	l1 := trigger("latest", "1", "l1")
	is(l1.ID, "running")
	l2 := trigger("latest", "1", "l2")
	is(l1.ID, "cancelled")
	if l2.Status != "pending" {
		t.Errorf("l2 %s (%s)", l2.Status, l2.Reason)
	}
	gates.Open("l2")
	is(l2.ID, "succeeded")

	// A key past its bound fails the run, naming it.
	bad := trigger("sync", strings.Repeat("x", 300), "bad")
	if bad.Status != "failed" || !strings.Contains(bad.Reason, "concurrency[0].key: evaluates to") {
		t.Errorf("a key past the bound: %s (%s)", bad.Status, bad.Reason)
	}

	// Twenty triggers at once, a limit of 2: never more than 2 at once,
	// and every one runs.
	var ids []uuid.UUID
	var wg sync.WaitGroup
	var idsMu sync.Mutex
	for range 20 {
		wg.Go(func() {
			r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "pair"}, run.TriggerOptions{
				ParamTexts: map[string]string{"customer": "many", "gate": "open"}})
			if err != nil {
				t.Error(err)
				return
			}
			idsMu.Lock()
			ids = append(ids, r.ID)
			idsMu.Unlock()
		})
	}
	wg.Wait()
	gates.Open("open")
	for _, id := range ids {
		is(id, "succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if most["pair/many"] > 2 || most["sync/1"] > 1 {
		t.Errorf("at most %d runs of pair's key many at once (limit 2), %d of sync's key 1 (limit 1)", most["pair/many"], most["sync/1"])
	}
}
