package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// An event received while a wait's park is not yet committed still ends
// the wait: the events step's transaction waits for the parks in flight
// of its events' tenant and type (their advisory lock), then sees the
// wait. Without that, the step would have read no wait, taken the event,
// and the wait would have missed it. Both transactions run READ COMMITTED
// (a PostgreSQL deployment's isolation): under SERIALIZABLE the events
// step's snapshot is older than the lock it waits for (the next test).
func TestAnEventMeetsAWaitParkedMeanwhile(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "ship"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "shipped", Wait: &dag.Wait{Event: "order.shipped", Timeout: dag.D(time.Hour)}}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	a := &run.Applier{Dispatcher: d}
	rc := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	parking, err := pool.BeginTx(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	defer parking.Rollback(ctx)
	ids, err := a.Insert(ctx, parking, []run.New{{Job: run.JobRef{ID: j.ID, Tenant: j.Tenant, Version: j.Version, Shard: j.Shard, Spec: &j.Spec},
		At: time.Now(), Trigger: lifecycle.TriggerManual, Status: lifecycle.RunPending}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The event, received after the park, while it is uncommitted.
	var received time.Time
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&received); err != nil {
		t.Fatal(err)
	}
	fields := map[string]any{"id": "s-1", "type": "order.shipped", "source": "", "time": received.Format(time.RFC3339Nano), "data": map[string]any{}}
	ev, _ := json.Marshal(fields)
	ended := make(chan int, 1)
	go func() {
		var n int
		err := pgx.BeginTxFunc(ctx, pool, rc, func(tx pgx.Tx) error {
			var err error
			n, err = a.EndWaits(ctx, tx, []run.Arrival{{Tenant: job.DefaultTenant, Type: "order.shipped", ReceivedAt: received, Event: ev, Fields: fields}})
			return err
		})
		if err != nil {
			t.Error(err)
		}
		ended <- n
	}()
	select {
	case n := <-ended:
		t.Fatalf("the events step went on while the park was in flight, ending %d waits", n)
	case <-time.After(500 * time.Millisecond):
	}
	if err := parking.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-ended; n != 1 {
		t.Fatalf("the event ended %d waits, want the one parked meanwhile", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM tasks WHERE run_id = $1 AND status = 'succeeded'", ids[0]); n != 1 {
		t.Error("the wait's task did not succeed")
	}
}

// The same race under SERIALIZABLE (tests' isolation, CockroachDB's): the
// events step's snapshot is older than the park it waited for, so it
// cannot see the wait. The park reads the pending events its waits may
// take (ReadEventsOfWaits), the events step marks the event taken: the
// database aborts one of the two, and the retry (store.InRawTx's) of
// either sees the other. Either the event ends the wait, or the park was
// stamped after the event (then the event was not for it); never a wait
// parked before an event that the event's step took without ending it.
func TestAnEventMeetsAWaitParkedMeanwhileSerializable(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "ship"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "shipped", Wait: &dag.Wait{Event: "order.shipped", Timeout: dag.D(time.Hour)}}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	a := &run.Applier{Dispatcher: d}
	ser := pgx.TxOptions{IsoLevel: pgx.Serializable}
	park := func(tx pgx.Tx) error {
		_, err := a.Insert(ctx, tx, []run.New{{Job: run.JobRef{ID: j.ID, Tenant: j.Tenant, Version: j.Version, Shard: j.Shard, Spec: &j.Spec},
			At: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Trigger: lifecycle.TriggerManual, Status: lifecycle.RunPending}}, nil, nil)
		return err
	}
	parking, err := pool.BeginTx(ctx, ser)
	if err != nil {
		t.Fatal(err)
	}
	defer parking.Rollback(ctx)
	if err := park(parking); err != nil {
		t.Fatal(err)
	}
	// The event, published (committed) after the park's stamp, while the
	// park is uncommitted.
	var eventID uuid.UUID
	var received time.Time
	if err := pool.QueryRow(ctx, `INSERT INTO events (id, tenant_id, event_key, type, data, time, received_at, shard)
		VALUES (gen_random_uuid(), $1, 's-1', 'order.shipped', '{}', now(), clock_timestamp(), 0) RETURNING id, received_at`, job.DefaultTenant).Scan(&eventID, &received); err != nil {
		t.Fatal(err)
	}
	fields := map[string]any{"id": "s-1", "type": "order.shipped", "source": "", "time": received.Format(time.RFC3339Nano), "data": map[string]any{}}
	ev, _ := json.Marshal(fields)
	ended := make(chan int, 1)
	go func() { // the events step: its waits ended and the event taken, retried as the scheduler's is
		var n int
		err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
			var err error
			if n, err = a.EndWaits(ctx, tx, []run.Arrival{{Tenant: job.DefaultTenant, Type: "order.shipped", ReceivedAt: received, Event: ev, Fields: fields}}); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "UPDATE events SET pending = false WHERE id = $1", eventID)
			return err
		})
		if err != nil {
			t.Error(err)
		}
		ended <- n
	}()
	time.Sleep(500 * time.Millisecond) // the events step waits for the park in flight
	if err := parking.Commit(ctx); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "40001" {
			t.Fatal(err)
		}
		// The park aborted: parked again, as its caller retries it.
		if err := store.InRawTx(ctx, pool, park); err != nil {
			t.Fatal(err)
		}
	}
	n := <-ended
	var status string
	var parkedAt *time.Time
	if err := pool.QueryRow(ctx, `SELECT t.status, p.created_at FROM tasks AS t LEFT JOIN parked_steps AS p ON p.task_id = t.id
		WHERE t.step = 'shipped'`).Scan(&status, &parkedAt); err != nil {
		t.Fatal(err)
	}
	switch {
	case n == 1 && status == "succeeded":
		t.Log("the events step was retried and ended the wait")
	case n == 0 && status == "running" && parkedAt != nil && parkedAt.After(received):
		t.Log("the park was retried, stamped after the event")
	default:
		t.Fatalf("the event ended %d waits; the wait is %s, parked at %v, the event received at %s", n, status, parkedAt, received)
	}
}

// A decision after an approval's timeout is refused, though the timers
// step has not ended it yet (no scheduler runs here); so is a comment
// that is not one line of text, and a caller that names no principal.
func TestADecisionAfterTheTimeoutIsRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "ask"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "ok", Approval: &dag.Approval{Timeout: dag.D(time.Second)}}}}}, ""); err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	r, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "ask"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(a job.Actor, comment string) error {
		_, err := runs.Decide(ctx, a, run.Decision{Run: r.ID, Step: "ok", Approve: true, Comment: comment})
		return err
	}
	var fe *dag.FieldError
	if err := decide(job.Anonymous, "fine\x1b[2J"); !errors.As(err, &fe) || fe.Field != "comment" {
		t.Errorf("a comment with a terminal escape: %v", err)
	}
	var denied *run.DeniedError
	if err := decide(job.Actor{Tenant: job.DefaultTenant, Name: "system"}, ""); !errors.As(err, &denied) {
		t.Errorf("a caller without a principal: %v", err)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := decide(job.Anonymous, ""); !errors.Is(err, run.ErrNotAwaitingApproval) || !strings.Contains(err.Error(), "its timeout passed") {
		t.Errorf("a decision after the timeout: %v", err)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM step_decisions"); n != 0 {
		t.Errorf("refused decisions wrote %d rows", n)
	}
}
