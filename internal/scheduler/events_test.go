package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/orrery-dev/orrery/internal/store"
)

// An event starts one run of each active job of its tenant whose
// schedule.event names its type and whose filter holds, with the event in
// its expressions (event and run.event); a repeat of its id starts
// nothing; a paused job, another type, a filter that is false, or one that
// fails on the event starts nothing; the events are all matched.
func TestEventsStartOneRunPerJobAndEvent(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[string]string{} // reserve's payload by run
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"reserve": func(ctx context.Context, c executor.Call) error {
			mu.Lock()
			defer mu.Unlock()
			seen[c.RunID.String()] = string(c.Payload)
			return nil
		},
	})
	startPolicyNode(t, pool, node.Config{})
	on := func(filter string) schedule.Spec {
		return schedule.Spec{Event: &schedule.Event{Type: "order.paid", Filter: filter}}
	}
	big := createJob(t, pool, "reserve-big", dag.JobSpec{Schedule: on("${{ event.data.amount >= 100 }}"), Overlap: dag.OverlapAllow,
		Run:     &dag.Executor{Handler: "reserve"},
		Payload: dag.Payload(`{"order": "${{ event.data.order }}", "id": "${{ run.event.id }}", "trigger": "${{ run.trigger }}"}`)})
	all := createJob(t, pool, "reserve-all", dag.JobSpec{Schedule: on(""), Overlap: dag.OverlapAllow, Run: &dag.Executor{Handler: "reserve"}})
	// Its overlap not written: a job of events alone runs once for each
	// (allow), also for a burst of events while its runs are active.
	byDefault := createJob(t, pool, "reserve-by-default", dag.JobSpec{Schedule: on(""), Run: &dag.Executor{Handler: "reserve"}})
	if byDefault.Spec.Overlap != dag.OverlapAllow {
		t.Errorf("a job of schedule.event alone has overlap %q by default, want allow", byDefault.Spec.Overlap)
	}
	createJob(t, pool, "fails", dag.JobSpec{Schedule: on("${{ event.data.missing.deeper > 1 }}"), Run: &dag.Executor{Handler: "reserve"}})
	createJob(t, pool, "shipped", dag.JobSpec{Schedule: schedule.Spec{Event: &schedule.Event{Type: "order.shipped"}}, Run: &dag.Executor{Handler: "reserve"}})
	if big.NextFireAt != nil {
		t.Errorf("a job of schedule.event alone has a next fire time: %s", big.NextFireAt)
	}
	jobs, _, _ := services(t, pool)
	paused := createJob(t, pool, "paused", dag.JobSpec{Schedule: on(""), Run: &dag.Executor{Handler: "reserve"}})
	if _, err := jobs.Pause(ctx, job.Anonymous, job.Ref{ID: paused.ID}); err != nil {
		t.Fatal(err)
	}

	publish := func(id string, amount int) event.Published {
		t.Helper()
		p, err := event.Publish(ctx, pool, job.DefaultTenant, jobs.Shards(), event.Event{Type: "order.paid", ID: id,
			Data: []byte(fmt.Sprintf(`{"order": "o-%s", "amount": %d}`, id, amount))})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Another tenant's event of the same type and id reaches none of this
	// tenant's jobs, and takes no id of this tenant.
	other := uuid.Must(uuid.NewV7())
	if _, err := pool.Exec(ctx, "INSERT INTO tenants (id, name) VALUES ($1, 'other')", other); err != nil {
		t.Fatal(err)
	}
	if _, err := event.Publish(ctx, pool, other, jobs.Shards(), event.Event{Type: "order.paid", ID: "e1", Data: []byte(`{"order": "x", "amount": 500}`)}); err != nil {
		t.Fatal(err)
	}
	first := publish("e1", 150)
	publish("e2", 20)
	again := publish("e1", 999) // a provider's retry: the first event, nothing more
	if !again.Duplicate || again.ID != first.ID || first.Duplicate {
		t.Fatalf("publish e1 twice: %+v then %+v; want the second a duplicate of the first", first, again)
	}
	countOf := func(j uuid.UUID) int {
		return enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1 AND trigger = 'event' AND status = 'succeeded'", j)
	}
	enginetest.WaitFor(t, 30*time.Second, "the runs of e1 and e2", func() bool { return countOf(big.ID) == 1 && countOf(all.ID) == 2 })
	enginetest.WaitFor(t, 30*time.Second, "every event matched", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM events WHERE pending") == 0
	})
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs AS r JOIN jobs AS j ON j.id = r.job_id WHERE j.name IN ('fails', 'shipped', 'paused')"); n != 0 {
		t.Errorf("%d runs of the jobs no event should start", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM events"); n != 3 {
		t.Errorf("%d events written, want 3 (the other tenant's, and the repeat writes nothing)", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE tenant_id = $1", other); n != 0 {
		t.Errorf("%d runs in the other tenant, which has no job", n)
	}
	var runID uuid.UUID
	var ev []byte
	if err := pool.QueryRow(ctx, "SELECT id, event FROM runs WHERE job_id = $1", big.ID).Scan(&runID, &ev); err != nil {
		t.Fatal(err)
	}
	var got struct {
		ID, Type, Source, Time string
		Data                   map[string]any
	}
	if err := json.Unmarshal(ev, &got); err != nil || got.ID != "e1" || got.Type != "order.paid" || got.Data["order"] != "o-e1" || got.Time == "" {
		t.Errorf("run.event %s (%v)", ev, err)
	}
	mu.Lock()
	payload := seen[runID.String()]
	mu.Unlock()
	if payload != `{"id":"e1","order":"o-e1","trigger":"event"}` {
		t.Errorf("the step read %s", payload)
	}

	// Publish a burst: each event starts its runs once.
	for i := range 50 {
		publish(fmt.Sprintf("burst-%d", i), 100+i)
	}
	enginetest.WaitFor(t, 60*time.Second, "the burst's runs", func() bool {
		return countOf(big.ID) == 51 && countOf(all.ID) == 52 && countOf(byDefault.ID) == 52
	})
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM (SELECT job_id, event_id FROM runs WHERE event_id IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1) AS d"); n != 0 {
		t.Errorf("%d (job, event) pairs with more than one run", n)
	}
}

// The events step takes pending events tenant by tenant: behind a tenant's
// flood of 300, another tenant's one event is in the first batch, and the
// tenants take turns from the one after the last taken.
func TestPendingEventsTakeTurnsByTenant(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _, _ := services(t, pool)
	flood, quiet := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	for _, tn := range []uuid.UUID{flood, quiet} {
		if _, err := pool.Exec(ctx, "INSERT INTO tenants (id, name) VALUES ($1, $2)", tn, "t-"+tn.String()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		if _, err := event.Publish(ctx, pool, flood, jobs.Shards(), event.Event{Type: "x", ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := event.Publish(ctx, pool, quiet, jobs.Shards(), event.Event{Type: "x", ID: "one"}); err != nil {
		t.Fatal(err)
	}
	all := make([]int32, jobs.Shards())
	for i := range all {
		all[i] = int32(i)
	}
	take := func(after uuid.UUID) []store.TakePendingEventsRow {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := store.New(tx).TakePendingEvents(ctx, store.TakePendingEventsParams{Shards: all, Batch: 100, PerTenant: 10, AfterTenant: after})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	count := func(rows []store.TakePendingEventsRow) map[uuid.UUID]int {
		n := map[uuid.UUID]int{}
		for _, r := range rows {
			n[r.TenantID]++
		}
		return n
	}
	if n := count(take(uuid.Nil)); n[flood] != 10 || n[quiet] != 1 {
		t.Errorf("a batch took %d of the flood and %d of the quiet tenant; want 10 and 1", n[flood], n[quiet])
	}
	first, second := flood, quiet
	if second.String() < first.String() {
		first, second = second, first
	}
	if rows := take(first); len(rows) == 0 || rows[0].TenantID != second {
		t.Errorf("after tenant %s, the batch starts with %v; want %s", first, rows, second)
	}
}
