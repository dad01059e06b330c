package run_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

// An event received while a wait's park is not yet committed still ends
// the wait: the events step's transaction waits for the parks in flight
// of its events' tenant and type (their advisory lock), then sees the
// wait. Without that, the step would have read no wait, taken the event,
// and the wait would have missed it. Both transactions run READ COMMITTED
// (a PostgreSQL deployment's isolation): under SERIALIZABLE the events
// step's snapshot is older than the lock it waits for (docs/parked-steps.md,
// "Known gaps").
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
