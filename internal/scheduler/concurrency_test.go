package scheduler_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
// does not evaluate fails the run naming it; a retry of a run of a full
// key is queued for it. Many triggers at once never run more than the
// limit of one key.
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
		return triggerParams(t, runs, name, map[string]string{"customer": customer, "gate": g})
	}
	is := func(id uuid.UUID, status string) { t.Helper(); waitRunStatus(t, pool, id, status) }

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

	// A retry holds the run's keys again: at a full key it is queued for
	// it, and runs once the holder ends.
	r1 := trigger("sync", "9", "r1")
	is(r1.ID, "running")
	if _, err := runs.CancelRun(ctx, job.Anonymous, r1.ID, "test"); err != nil {
		t.Fatal(err)
	}
	is(r1.ID, "cancelled")
	r2 := trigger("sync", "9", "r2")
	is(r2.ID, "running")
	again, err := runs.RetryRun(ctx, job.Anonymous, r1.ID, false)
	if err != nil || again.Status != "queued" || again.Reason != "concurrency key customer=9 1/1" {
		t.Fatalf("a retry of a run of a full key: %+v, %v; want queued for it", again, err)
	}
	gates.Open("r2")
	is(r2.ID, "succeeded")
	is(r1.ID, "running")
	gates.Open("r1")
	is(r1.ID, "succeeded")

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

// A step's concurrency keys bound its tasks by key across the tenant's
// jobs: tasks of two jobs naming one key never run above its limit, a
// held task says why and starts when a holder ends (or is cancelled), a
// key read from a parent's output or another key is held to as well, one
// key's backlog keeps no other key waiting, and a key that does not
// evaluate dead-letters its task naming it.
func TestStepConcurrencyKeysBoundTasks(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var mu sync.Mutex
	running, most := map[string]int{}, map[string]int{}
	gates := enginetest.NewGates(t)
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"hold": func(ctx context.Context, c executor.Call) error {
			var p struct {
				Keys []string
				Gate string
			}
			_ = json.Unmarshal(c.Payload, &p)
			if p.Gate == "cancelled" { // a cancel frees its keys at once, as its slot: the attempt
				<-ctx.Done() // may run on until its worker hears of it (not counted)
				return nil
			}
			mu.Lock()
			for _, k := range p.Keys {
				running[k]++
				most[k] = max(most[k], running[k])
			}
			mu.Unlock()
			defer func() {
				mu.Lock()
				for _, k := range p.Keys {
					running[k]--
				}
				mu.Unlock()
			}()
			select {
			case <-gates.Wait(p.Gate):
			case <-ctx.Done():
			}
			return nil
		},
		"plan": func(ctx context.Context, c executor.Call) error {
			return executor.SetOutput(ctx, map[string]string{"vendor": "v"})
		},
	})
	startPolicyNode(t, pool, node.Config{})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	params := map[string]dag.Param{"account": {Type: "string"}, "gate": {Type: "string", Default: dag.Payload(`"g"`)}}
	hold := func() dag.Executor { return dag.Executor{Handler: "hold"} }
	payload := func(keys ...string) dag.Payload {
		b, _ := json.Marshal(keys)
		return dag.Payload(`{"keys": ` + string(b) + `, "gate": "${{ params.gate }}"}`)
	}
	// two jobs share the key acct-ACCOUNT, limit 2
	for _, name := range []string{"sync-a", "sync-b"} {
		createJob(t, pool, name, dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Params: params,
			Steps: []dag.Step{{Name: "call", Run: hold(), Payload: payload("acct-${{ params.account }}"),
				Concurrency: []dag.ConcurrencyLimit{{Key: "acct-${{ params.account }}", Limit: 2}}}}})
	}
	// a key from a parent's output, and a second key of limit 1
	createJob(t, pool, "two-keys", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Params: params,
		Steps: []dag.Step{{Name: "plan", Run: dag.Executor{Handler: "plan"}},
			{Name: "call", Needs: []string{"plan"}, Run: hold(), Payload: payload("vendor-${{ steps.plan.output.vendor }}", "one"),
				Concurrency: []dag.ConcurrencyLimit{{Key: "vendor-${{ steps.plan.output.vendor }}", Limit: 5}, {Key: "one", Limit: 1}}}}})
	_, _, runs := services(t, pool)
	trigger := func(name, account, g string) *run.Run {
		t.Helper()
		return triggerParams(t, runs, name, map[string]string{"account": account, "gate": g})
	}
	is := func(id uuid.UUID, status string) { t.Helper(); waitRunStatus(t, pool, id, status) }
	step := func(id uuid.UUID, name string) run.Task {
		t.Helper()
		d, err := runs.Get(ctx, job.Anonymous, id, run.ItemsPage{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range d.Tasks {
			if k.Step == name {
				return k
			}
		}
		t.Fatalf("run %s has no step %s", id, name)
		return run.Task{}
	}

	// Two runs of each job on account 1: two hold the key, two are held.
	var ids []uuid.UUID
	for i, name := range []string{"sync-a", "sync-b", "sync-a", "sync-b"} {
		g := "g1"
		if i == 0 {
			g = "cancelled"
		}
		ids = append(ids, trigger(name, "1", g).ID)
	}
	for _, id := range ids[:2] {
		is(id, "running")
	}
	held := step(ids[3], "call")
	if held.WaitReason != "concurrency key acct-1 2/2" || strings.Join(held.FlowKeys, ",") != "acct-1" {
		t.Errorf("a held task: %q, keys %q", held.WaitReason, held.FlowKeys)
	}
	// Another account does not wait for account 1.
	other := trigger("sync-a", "2", "g2")
	is(other.ID, "running")
	// Cancelling a holder starts a held task.
	if _, err := runs.CancelRun(ctx, job.Anonymous, ids[0], "test"); err != nil {
		t.Fatal(err)
	}
	is(ids[2], "running")
	if r := step(ids[3], "call"); r.WaitReason != "concurrency key acct-1 2/2" {
		t.Errorf("still held: %q", r.WaitReason)
	}
	gates.Open("g1")
	gates.Open("g2")
	for _, id := range append(ids[1:], other.ID) {
		is(id, "succeeded")
	}

	// One key's backlog (20 tasks at limit 2) keeps no other key waiting.
	var big []uuid.UUID
	for range 20 {
		big = append(big, trigger("sync-a", "big", "big").ID)
	}
	var small []uuid.UUID
	for i := range 5 {
		small = append(small, trigger("sync-b", "small-"+string(rune('a'+i)), "small").ID)
	}
	for _, id := range small {
		is(id, "running")
	}
	// (both of big's holders in their handler before its gate opens: else
	// the first may end before the second starts, and they never overlap)
	enginetest.WaitFor(t, 30*time.Second, "two tasks of acct-big running", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running["acct-big"] == 2
	})
	gates.Open("small")
	gates.Open("big")
	for _, id := range append(big, small...) {
		is(id, "succeeded")
	}

	// A key from a parent's output, and a second key of limit 1.
	var multi []uuid.UUID
	for i := range 4 {
		multi = append(multi, trigger("two-keys", string(rune('a'+i)), "m").ID)
	}
	enginetest.WaitFor(t, 30*time.Second, "one task of two-keys running, three held", func() bool {
		held := 0
		for _, id := range multi {
			if strings.HasPrefix(step(id, "call").WaitReason, "concurrency key ") {
				held++
			}
		}
		return held == 3
	})
	if k := step(multi[0], "call").FlowKeys; strings.Join(k, ",") != "vendor-v,one" {
		t.Errorf("two-keys' keys: %q", k)
	}
	gates.Open("m")
	for _, id := range multi {
		is(id, "succeeded")
	}

	// A key past its bound dead-letters the task, naming the key.
	bad := trigger("sync-a", strings.Repeat("x", 300), "bad")
	is(bad.ID, "failed")
	if e := step(bad.ID, "call").LastError; !strings.Contains(e, "concurrency[0].key: evaluates to") {
		t.Errorf("a key past the bound: %q", e)
	}

	mu.Lock()
	defer mu.Unlock()
	if most["acct-1"] > 2 || most["acct-big"] > 2 || most["one"] > 1 {
		t.Errorf("at most %d tasks of acct-1 at once (limit 2), %d of acct-big (limit 2), %d of one (limit 1)", most["acct-1"], most["acct-big"], most["one"])
	}
	if most["acct-big"] < 2 {
		t.Errorf("acct-big ran %d at once; its limit is 2", most["acct-big"])
	}
}

// triggerParams triggers a run of job default/name with params.
func triggerParams(t *testing.T, runs *run.Service, name string, params map[string]string) *run.Run {
	t.Helper()
	r, err := runs.TriggerWith(context.Background(), job.Anonymous, job.Ref{Namespace: "default", Name: name}, run.TriggerOptions{ParamTexts: params})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitRunStatus waits for run id to reach status.
func waitRunStatus(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, status string) {
	t.Helper()
	enginetest.WaitFor(t, 30*time.Second, "run "+id.String()+" "+status, func() bool { return runStatus(t, pool, id) == status })
}

// A step's rate limit bounds how often the tasks naming its key start,
// across the tenant's jobs: six runs of two jobs on one key of 2 a 2 s
// (a token a second) are admitted as a token bucket allows (2 at once,
// then one a second), a task waiting for its token says when it comes,
// another key's task does not wait, and every run succeeds.
func TestStepRateLimitSpacesStarts(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	gates := enginetest.NewGates(t)
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{"hold": func(ctx context.Context, c executor.Call) error {
		var gate string
		_ = json.Unmarshal(c.Payload, &gate)
		select { // (each holds its admission's mark until the test read it)
		case <-gates.Wait(gate):
		case <-ctx.Done():
		}
		return nil
	}})
	startPolicyNode(t, pool, node.Config{})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	const per, limit = 2 * time.Second, 2
	for _, name := range []string{"sync-a", "sync-b"} {
		createJob(t, pool, name, dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
			Params: map[string]dag.Param{"vendor": {Type: "string"}},
			Steps: []dag.Step{{Name: "call", Run: dag.Executor{Handler: "hold"}, Payload: dag.Payload(`"${{ params.vendor }}"`),
				RateLimit: &dag.RateLimit{Key: "vendor-${{ params.vendor }}", Limit: limit, Per: dag.Duration{Duration: per}}}}})
	}
	_, _, runs := services(t, pool)
	var ids []uuid.UUID
	for i := range 6 {
		ids = append(ids, triggerParams(t, runs, []string{"sync-a", "sync-b"}[i%2], map[string]string{"vendor": "v"}).ID)
	}
	other := triggerParams(t, runs, "sync-a", map[string]string{"vendor": "w"})
	waitRunStatus(t, pool, other.ID, "running")
	// While v's line waits, its last task says when its token comes.
	d, err := runs.Get(context.Background(), job.Anonymous, ids[5], run.ItemsPage{})
	if err != nil {
		t.Fatal(err)
	}
	if why := d.Tasks[0].WaitReason; d.Tasks[0].AdmittedAt == nil && !strings.HasPrefix(why, "rate limit vendor-v 2/2s, next token in ") {
		t.Errorf("a task in v's line: %q", why)
	}
	gates.Open("w")
	waitRunStatus(t, pool, other.ID, "succeeded")
	enginetest.WaitFor(t, 30*time.Second, "key v's six tasks admitted", func() bool {
		return enginetest.Int(t, pool, `SELECT count(*) FROM tasks WHERE run_id = ANY($1) AND admitted_at IS NOT NULL`, ids) == 6
	})
	rows, err := pool.Query(context.Background(), `SELECT t.admitted_at FROM tasks t WHERE t.run_id = ANY($1) ORDER BY t.admitted_at`, ids)
	if err != nil {
		t.Fatal(err)
	}
	ats, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	// A token bucket of 2, a token a second: between any two admissions,
	// at most 2 + the tokens that came between them (a millisecond of
	// slack for the clock's rounding).
	interval := per / limit
	for i := range ats {
		for j := i + 1; j < len(ats); j++ {
			if n, most := j-i+1, limit+int((ats[j].Sub(ats[i])+time.Millisecond)/interval); n > most {
				t.Errorf("%d admissions of key v in %v (the %dth to the %dth); a token bucket of %d, a token every %v, allows %d",
					n, ats[j].Sub(ats[i]), i+1, j+1, limit, interval, most)
			}
		}
	}
	gates.Open("v")
	for _, id := range ids {
		waitRunStatus(t, pool, id, "succeeded")
	}
	t.Logf("key v's six admissions over %v (a bucket of 2, then a token a second: at least 4 s)", ats[len(ats)-1].Sub(ats[0]))
}
