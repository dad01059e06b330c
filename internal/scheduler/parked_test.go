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
	"github.com/orrery-dev/orrery/internal/event"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

// A step that sleeps parks: its task runs on no worker (no worker, lease,
// admission mark or River job), its row says when it ends, and the
// scheduler ends it then, passing {until, time} to the step after. An
// until that evaluates to a past instant ends at once; one that is no
// RFC 3339 instant, or more than a year ahead, dead-letters the step
// naming the field. A cancel ends it and removes its row; a retry parks
// it again.
func TestSleepingStepParksAndWakes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	after := startNoteWorker(t, pool)
	startPolicyNode(t, pool, node.Config{})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	createJob(t, pool, "nap", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{
			{Name: "nap", Sleep: &dag.Sleep{For: 2 * time.Second}},
			{Name: "after", Needs: []string{"nap"}, Run: dag.Executor{Handler: "note"}, Payload: dag.Payload(`{"until": "${{ steps.nap.output.until }}"}`)},
		}})
	createJob(t, pool, "nap-until", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Params: map[string]dag.Param{"at": {Type: "string"}},
		Steps: []dag.Step{
			{Name: "nap", Sleep: &dag.Sleep{Until: "${{ params.at }}"}},
			{Name: "after", Needs: []string{"nap"}, Run: dag.Executor{Handler: "note"}},
		}})
	_, _, runs := services(t, pool)
	trigger := func(name string, params map[string]string) uuid.UUID {
		t.Helper()
		r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: name}, run.TriggerOptions{IgnoreOverlap: true, ParamTexts: params})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	waitRun := func(id uuid.UUID, status string) {
		t.Helper()
		enginetest.WaitFor(t, 60*time.Second, "run "+id.String()+" "+status, func() bool { return runStatus(t, pool, id) == status })
	}
	parked := func(id uuid.UUID) int {
		return enginetest.Int(t, pool, "SELECT count(*) FROM parked_steps WHERE run_id = $1", id)
	}

	r1 := trigger("nap", nil)
	enginetest.WaitFor(t, 20*time.Second, "the nap parked", func() bool { return parked(r1) == 1 })
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM tasks WHERE run_id = $1 AND step = 'nap' AND status = 'running'
		AND worker_id IS NULL AND lease_expires_at IS NULL AND admitted_at IS NULL AND attempt_worker = 'orrery (sleep)'`, r1); n != 1 {
		t.Errorf("the sleeping task is not running on no worker")
	}
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM river_job AS j JOIN tasks AS t ON j.args->>'task_id' = t.id::text WHERE t.run_id = $1 AND t.step = 'nap'`, r1); n != 0 {
		t.Errorf("the sleeping step has %d River jobs", n)
	}
	waitRun(r1, "succeeded")
	if parked(r1) != 0 {
		t.Error("the woken step's row is left")
	}
	slept := enginetest.Int(t, pool, `SELECT (extract(epoch FROM a.finished_at - a.started_at) * 1000)::int FROM attempts AS a JOIN tasks AS t ON t.id = a.task_id
		WHERE t.run_id = $1 AND t.step = 'nap'`, r1)
	if slept < 2000 {
		t.Errorf("the nap's attempt lasted %d ms, less than its 2 s", slept)
	}
	var p struct{ Until string }
	if err := json.Unmarshal([]byte(after(r1)), &p); err != nil || p.Until == "" {
		t.Errorf("after's payload %q: %v", after(r1), err)
	}

	// until: a past instant ends at once; a bad one, or one past the
	// bound, dead-letters the step.
	past := trigger("nap-until", map[string]string{"at": "2020-01-01T00:00:00Z"})
	waitRun(past, "succeeded")
	for at, want := range map[string]string{
		"tomorrow": `sleep.until: "tomorrow" is not an RFC 3339 instant`,
		time.Now().Add(400 * 24 * time.Hour).UTC().Format(time.RFC3339): "is more than 366 days ahead",
	} {
		id := trigger("nap-until", map[string]string{"at": at})
		waitRun(id, "failed")
		var last string
		if err := pool.QueryRow(ctx, "SELECT last_error FROM tasks WHERE run_id = $1 AND step = 'nap'", id).Scan(&last); err != nil || !strings.Contains(last, want) {
			t.Errorf("until %q: the step's error %q (%v), want %q", at, last, err, want)
		}
	}

	// A cancel ends the sleep and its row; a retry parks it again.
	long := trigger("nap-until", map[string]string{"at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	enginetest.WaitFor(t, 20*time.Second, "the long nap parked", func() bool { return parked(long) == 1 })
	if _, err := runs.CancelRun(ctx, job.Anonymous, long, "test"); err != nil {
		t.Fatal(err)
	}
	if parked(long) != 0 || runStatus(t, pool, long) != "cancelled" {
		t.Errorf("cancelled: %d rows parked, run %s", parked(long), runStatus(t, pool, long))
	}
	if _, err := runs.RetryRun(ctx, job.Anonymous, long, true); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 20*time.Second, "the long nap parked again", func() bool { return parked(long) == 1 })
	if n := enginetest.Int(t, pool, "SELECT attempt FROM tasks WHERE run_id = $1 AND step = 'nap'", long); n != 2 {
		t.Errorf("the retried nap is attempt %d, want 2", n)
	}
	if _, err := runs.CancelRun(ctx, job.Anonymous, long, "test"); err != nil {
		t.Fatal(err)
	}
}

// A step that waits for an event parks until an event of its type,
// published after it parked, for which its match holds (event is the
// one arriving, run.event the run's own): that event is its output and
// the step after it runs. An event published before it parked, one of
// another type, one its match refuses, and another tenant's end nothing;
// a second matching event ends nothing more. At its timeout it fails.
func TestWaitingStepEndsByItsEvent(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	after := startNoteWorker(t, pool)
	startPolicyNode(t, pool, node.Config{})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	createJob(t, pool, "ship", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Params: map[string]dag.Param{"order": {Type: "string"}},
		Steps: []dag.Step{
			{Name: "shipped", Wait: &dag.Wait{Event: "order.shipped", Match: "${{ event.data.order == params.order }}", Timeout: dag.D(time.Hour)}},
			{Name: "after", Needs: []string{"shipped"}, Run: dag.Executor{Handler: "note"}, Payload: dag.Payload(`{"carrier": "${{ steps.shipped.output.data.carrier }}", "id": "${{ steps.shipped.output.id }}"}`)},
		}})
	createJob(t, pool, "short", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "w", Wait: &dag.Wait{Event: "never.comes", Timeout: dag.D(time.Second)}}}})
	jobs, _, runs := services(t, pool)
	trigger := func(name string, params map[string]string) uuid.UUID {
		t.Helper()
		r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: name}, run.TriggerOptions{IgnoreOverlap: true, ParamTexts: params})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	publish := func(tenant uuid.UUID, typ, id, data string) {
		t.Helper()
		if _, err := event.Publish(ctx, pool, tenant, jobs.Shards(), event.Event{Type: typ, ID: id, Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	settled := func() {
		t.Helper()
		enginetest.WaitFor(t, 20*time.Second, "events taken", func() bool { return enginetest.Int(t, pool, "SELECT count(*) FROM events WHERE pending") == 0 })
	}
	waiting := func(id uuid.UUID) bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM parked_steps WHERE run_id = $1 AND kind = 'wait'", id) == 1
	}
	other := uuid.Must(uuid.NewV7())
	if _, err := pool.Exec(ctx, "INSERT INTO tenants (id, name) VALUES ($1, 'other')", other); err != nil {
		t.Fatal(err)
	}

	publish(job.DefaultTenant, "order.shipped", "early", `{"order": "A", "carrier": "early"}`) // before the wait parks
	settled()
	a := trigger("ship", map[string]string{"order": "A"})
	b := trigger("ship", map[string]string{"order": "B"})
	enginetest.WaitFor(t, 20*time.Second, "both waits parked", func() bool { return waiting(a) && waiting(b) })
	// The match event.data.order == params.order is indexed: each wait by
	// its order.
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM parked_steps WHERE match_key LIKE 'data' || chr(31) || 'order' || chr(31) || 's_'"); n != 2 {
		t.Errorf("%d waits parked with their order's key, want 2", n)
	}
	publish(job.DefaultTenant, "order.delivered", "x1", `{"order": "A"}`)         // another type
	publish(job.DefaultTenant, "order.shipped", "x2", `{"order": "C"}`)           // its match refuses it
	publish(job.DefaultTenant, "order.shipped", "x3", `{"no_order": true}`)       // its match fails on it
	publish(other, "order.shipped", "x4", `{"order": "A", "carrier": "another"}`) // another tenant's
	settled()
	if !waiting(a) || !waiting(b) {
		t.Fatal("an event that is not the one waited for ended a wait")
	}
	publish(job.DefaultTenant, "order.shipped", "ship-A", `{"order": "A", "carrier": "dhl"}`)
	enginetest.WaitFor(t, 30*time.Second, "A's run succeeds", func() bool { return runStatus(t, pool, a) == "succeeded" })
	publish(job.DefaultTenant, "order.shipped", "ship-A2", `{"order": "A", "carrier": "ups"}`) // ends nothing more
	settled()
	if p := after(a); !strings.Contains(p, `"carrier":"dhl"`) || !strings.Contains(p, `"id":"ship-A"`) {
		t.Errorf("A's after step read %q, want the event ship-A", p)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM every_attempt a JOIN tasks t ON t.id = a.task_id WHERE t.run_id = $1 AND t.step = 'shipped'", a); n != 1 {
		t.Errorf("A's wait has %d attempts", n)
	}
	if !waiting(b) || runStatus(t, pool, b) == "succeeded" {
		t.Error("B's wait ended by A's event")
	}

	// A wait's timeout fails it.
	s := trigger("short", nil)
	enginetest.WaitFor(t, 30*time.Second, "the short wait times out", func() bool { return runStatus(t, pool, s) == "failed" })
	var last string
	if err := pool.QueryRow(ctx, "SELECT last_error FROM tasks WHERE run_id = $1", s).Scan(&last); err != nil || !strings.Contains(last, "wait: no never.comes event matched before its timeout") {
		t.Errorf("the timed-out wait's error: %q (%v)", last, err)
	}
	// Retry from the failed step parks the wait again, as a new attempt.
	if _, err := runs.RetryRun(ctx, job.Anonymous, s, true); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 20*time.Second, "the retried wait parks again", func() bool { return waiting(s) })
	enginetest.WaitFor(t, 30*time.Second, "and times out again", func() bool { return runStatus(t, pool, s) == "failed" })
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM every_attempt a JOIN tasks t ON t.id = a.task_id WHERE t.run_id = $1", s); n != 2 {
		t.Errorf("the retried wait has %d attempts, want 2", n)
	}
	// So does a replay of its dead letter.
	dead := enginetest.UUID(t, pool, "SELECT id FROM tasks WHERE run_id = $1", s)
	if _, err := runs.ReplayDeadLetters(ctx, job.Anonymous, []uuid.UUID{dead}, job.Ref{}, 0); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 20*time.Second, "the replayed wait parks again", func() bool { return waiting(s) })
	enginetest.WaitFor(t, 30*time.Second, "and times out again", func() bool { return runStatus(t, pool, s) == "failed" })
	if _, err := runs.CancelRun(ctx, job.Anonymous, b, "test"); err != nil {
		t.Fatal(err)
	}
	if waiting(b) {
		t.Error("a cancelled wait's row is left")
	}
}

// Waits whose match is not indexed are bounded per tenant and event type
// (run.MaxUnkeyedWaits): past the bound a wait fails, naming it; keyed
// waits of the type are not counted.
func TestUnkeyedWaitsAreBounded(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	startPolicyNode(t, pool, node.Config{})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	unkeyed := createJob(t, pool, "unkeyed", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "w", Wait: &dag.Wait{Event: "big.order", Match: "${{ event.data.amount > 100 }}", Timeout: dag.D(time.Hour)}}}})
	createJob(t, pool, "keyed", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "w", Wait: &dag.Wait{Event: "big.order", Match: "${{ event.data.order == run.id }}", Timeout: dag.D(time.Hour)}}}})
	_, d, runs := services(t, pool)
	batch := make([]run.New, run.MaxUnkeyedWaits)
	at := time.Now()
	for i := range batch {
		batch[i] = run.New{Job: run.JobRef{ID: unkeyed.ID, Tenant: unkeyed.Tenant, Version: unkeyed.Version, Shard: unkeyed.Shard, Spec: &unkeyed.Spec},
			At: at.Add(time.Duration(i) * time.Microsecond), Trigger: lifecycle.TriggerManual, Status: lifecycle.RunPending}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := (&run.Applier{Dispatcher: d}).Insert(ctx, tx, batch, nil, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM parked_steps WHERE match_key IS NULL"); n != run.MaxUnkeyedWaits {
		t.Fatalf("%d unkeyed waits parked, want %d", n, run.MaxUnkeyedWaits)
	}
	trigger := func(name string) uuid.UUID {
		r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: name}, run.TriggerOptions{IgnoreOverlap: true})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	over, keyed := trigger("unkeyed"), trigger("keyed")
	enginetest.WaitFor(t, 20*time.Second, "the wait past the bound fails", func() bool { return runStatus(t, pool, over) == "failed" })
	var last string
	if err := pool.QueryRow(ctx, "SELECT last_error FROM tasks WHERE run_id = $1", over).Scan(&last); err != nil ||
		!strings.Contains(last, "wait.match: the tenant has 1000 steps waiting for big.order whose match is not indexed") {
		t.Errorf("the refused wait's error: %q (%v)", last, err)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM parked_steps WHERE run_id = $1 AND match_key IS NOT NULL", keyed); n != 1 {
		t.Error("a keyed wait of the type was refused with the unkeyed ones")
	}
}

// startNoteWorker starts a worker whose handler "note" keeps each run's
// payload, which the function it returns reads.
func startNoteWorker(t *testing.T, pool *pgxpool.Pool) func(run uuid.UUID) string {
	var mu sync.Mutex
	notes := map[uuid.UUID]string{}
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"note": func(ctx context.Context, c executor.Call) error {
			mu.Lock()
			defer mu.Unlock()
			notes[c.RunID] = string(c.Payload)
			return nil
		},
	})
	return func(run uuid.UUID) string {
		mu.Lock()
		defer mu.Unlock()
		return notes[run]
	}
}
