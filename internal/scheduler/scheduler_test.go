package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func startNode(t *testing.T, pool *pgxpool.Pool) { enginetest.StartNode(t, pool) }

func startWorker(t *testing.T, pool *pgxpool.Pool, handlers map[string]executor.HandlerFunc) {
	enginetest.StartWorker(t, pool, 20, handlers)
}

var waitFor = enginetest.WaitFor

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	return enginetest.Int(t, pool, sql, args...)
}

func handlerJob(name, cron, handler string) dag.Resource {
	return dag.Resource{
		Metadata: dag.Metadata{Name: name},
		Spec: dag.JobSpec{
			Schedule: schedule.Spec{Cron: schedule.Crons(cron)},
			Run:      &dag.Executor{Handler: handler},
			Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 2, Initial: dag.D(100 * time.Millisecond), Max: dag.D(200 * time.Millisecond)}},
		},
	}
}

func TestEverySecondJobRunsOnceAnInstant(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var calls atomic.Int64
	startWorker(t, pool, map[string]executor.HandlerFunc{"noop": func(context.Context, executor.Call) error { calls.Add(1); return nil }})
	jobs, _ := job.New(ctx, pool, nil)
	if _, err := jobs.Create(ctx, job.Anonymous, handlerJob("tick", "* * * * * *", "noop"), ""); err != nil {
		t.Fatal(err)
	}
	startNode(t, pool)
	waitFor(t, 15*time.Second, "5 runs succeeded", func() bool {
		return count(t, pool, "SELECT count(*) FROM runs WHERE status = 'succeeded'") >= 5
	})
	if n := count(t, pool, "SELECT count(*) FROM (SELECT scheduled_for FROM runs GROUP BY scheduled_for HAVING count(*) > 1) d"); n != 0 {
		t.Fatalf("%d instants ran twice", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM attempts WHERE outcome = 'succeeded'"); n < 5 {
		t.Fatalf("only %d attempts recorded", n)
	}
}

func TestRetriesThenDeadLetter(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	startWorker(t, pool, map[string]executor.HandlerFunc{"boom": func(context.Context, executor.Call) error { return errors.New("boom") }})
	jobs, _ := job.New(ctx, pool, nil)
	at := time.Now().UTC().Add(-time.Second).Format(time.RFC3339)
	r := handlerJob("once", "", "boom")
	r.Spec.Schedule = schedule.Spec{At: at}
	if _, err := jobs.Create(ctx, job.Anonymous, r, ""); err != nil {
		t.Fatal(err)
	}
	startNode(t, pool)
	waitFor(t, 30*time.Second, "the task is dead-lettered after 2 attempts", func() bool {
		return count(t, pool, "SELECT count(*) FROM tasks WHERE status = 'dead_lettered' AND attempt = 2") == 1
	})
	if n := count(t, pool, "SELECT count(*) FROM runs WHERE status = 'failed'"); n != 1 {
		t.Fatalf("run status: %d dead-lettered runs", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM attempts WHERE outcome = 'failed' AND error = 'boom'"); n != 2 {
		t.Fatalf("%d failed attempts recorded", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM attempts WHERE exit_reason = 'lease_expired'"); n != 0 {
		t.Fatalf("%d attempts ended by lease expiry: a report was lost", n)
	}

	// Replay: one more attempt, which fails and dead-letters again.
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	dead, _, err := runs.ListDeadLetters(ctx, job.Anonymous, job.Ref{Name: "once"}, 0, "")
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters %v %v", dead, err)
	}
	replayed, err := runs.ReplayDeadLetters(ctx, job.Anonymous, nil, job.Ref{Name: "once"}, 0)
	if err != nil || len(replayed) != 1 {
		t.Fatalf("replay %v %v", replayed, err)
	}
	waitFor(t, 30*time.Second, "the replayed task ran a third attempt", func() bool {
		return count(t, pool, "SELECT count(*) FROM tasks WHERE status = 'dead_lettered' AND attempt = 3") == 1
	})
	if n := count(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'replay'"); n != 1 {
		t.Fatalf("replay audited %d times", n)
	}
}

func TestCancelAndTrigger(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	release := make(chan struct{})
	startWorker(t, pool, map[string]executor.HandlerFunc{"block": func(ctx context.Context, _ executor.Call) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ctx.Err()
	}})
	defer close(release)
	jobs, _ := job.New(ctx, pool, nil)
	r := handlerJob("manual", "@yearly", "block")
	r.Spec.Overlap = dag.OverlapSkip
	if _, err := jobs.Create(ctx, job.Anonymous, r, ""); err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	first, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: "manual"}, "k1", false)
	if err != nil || first.Status != lifecycle.RunPending {
		t.Fatalf("trigger %+v %v", first, err)
	}
	again, _ := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: "manual"}, "k1", false)
	if again.ID != first.ID {
		t.Fatal("a replayed trigger made a second run")
	}
	for _, key := range []string{"k\x00", strings.Repeat("k", job.MaxIdempotencyKey+1)} {
		var inv *dag.FieldError
		if _, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: "manual"}, key, false); !errors.As(err, &inv) || inv.Field != "idempotency_key" {
			t.Fatalf("trigger with key %.10q...: %v, want an error on idempotency_key", key, err)
		}
	}
	waitFor(t, 10*time.Second, "the run is running", func() bool {
		return count(t, pool, "SELECT count(*) FROM every_attempt WHERE outcome = 'running'") == 1
	})
	skipped, _ := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: "manual"}, "", false)
	if skipped.Status != lifecycle.RunSkipped {
		t.Fatalf("overlap: skip let a second run start: %+v", skipped)
	}
	cancelled, err := runs.CancelRun(ctx, job.Anonymous, first.ID, "test")
	if err != nil || cancelled.Status != lifecycle.RunCancelled {
		t.Fatalf("cancel %+v %v", cancelled, err)
	}
	waitFor(t, 10*time.Second, "the running attempt ends cancelled", func() bool {
		return count(t, pool, "SELECT count(*) FROM attempts WHERE outcome = 'failed' AND exit_reason = 'cancelled'") == 1
	})
	if n := count(t, pool, "SELECT count(*) FROM audit_log WHERE action IN ('trigger', 'cancel')"); n != 3 {
		t.Fatalf("%d trigger/cancel audit rows, want 3", n)
	}
}

// With River's tables in a database of their own (as with CockroachDB for
// the state), releases go through the outbox and the relay.
func TestSeparateQueueDatabaseThroughTheOutbox(t *testing.T) {
	t.Parallel()
	state, queue := pgtest.Pool(t), pgtest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	w, err := worker.New(worker.Config{StatePool: state, QueueDBs: dispatch.QueueDBs{Default: queue}, Queues: map[string]int{"default": 10},
		Handlers: map[string]executor.HandlerFunc{"noop": func(context.Context, executor.Call) error { calls.Add(1); return nil }}})
	if err != nil {
		t.Fatal(err)
	}
	wDone := make(chan error, 1)
	go func() { wDone <- w.Run(ctx) }()
	d, err := dispatch.NewOutbox(dispatch.QueueDBs{Default: queue})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(ctx, node.Config{Pool: state, Dispatcher: d, ShardTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	nDone := make(chan error, 1)
	go func() { nDone <- n.Run(ctx) }()
	jobs, _ := job.New(ctx, state, nil)
	if _, err := jobs.Create(ctx, job.Anonymous, handlerJob("tick", "* * * * * *", "noop"), ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "3 runs succeeded", func() bool {
		return count(t, state, "SELECT count(*) FROM runs WHERE status = 'succeeded'") >= 3
	})
	if n := count(t, state, "SELECT count(*) FROM river_job"); n != 0 {
		t.Fatalf("%d River jobs in the state database; they belong in the queue database", n)
	}
	if n := count(t, queue, "SELECT count(*) FROM river_job"); n < 3 {
		t.Fatalf("only %d River jobs in the queue database", n)
	}
	cancel()
	<-nDone
	<-wDone
}
