package scheduler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/dispatch"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/job"
	"github.com/orrery-dev/orrery/engine/pgtest"
	"github.com/orrery-dev/orrery/engine/scheduler"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/shard"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// startNode runs a scheduler node (shards, scheduler, reaper) until the test ends.
func startNode(t *testing.T, pool *pgxpool.Pool) *scheduler.Scheduler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := shard.NewManager(ctx, pool, shard.Config{TTL: 2 * time.Second, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	s, err := scheduler.New(scheduler.Config{Pool: pool, Shards: mgr, Dispatcher: d, MaxSleep: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := &scheduler.Reaper{Pool: pool, Dispatcher: d, Interval: 200 * time.Millisecond}
	done := make(chan struct{}, 3)
	go func() { _ = mgr.Run(ctx); done <- struct{}{} }()
	go func() { _ = s.Run(ctx); done <- struct{}{} }()
	go func() { _ = r.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		for range 3 {
			<-done
		}
	})
	return s
}

func startWorker(t *testing.T, pool *pgxpool.Pool, handlers map[string]executor.HandlerFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := worker.New(worker.Config{StatePool: pool, Queues: map[string]int{"default": 20}, Handlers: handlers, LeaseTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func handlerJob(name, cron, handler string) dag.Resource {
	return dag.Resource{
		Metadata: dag.Metadata{Name: name},
		Spec: dag.JobSpec{
			Schedule: schedule.Spec{Cron: cron},
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
	if n := count(t, pool, "SELECT count(*) FROM runs WHERE status = 'dead_lettered'"); n != 1 {
		t.Fatalf("run status: %d dead-lettered runs", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM attempts WHERE outcome = 'failed' AND error = 'boom'"); n != 2 {
		t.Fatalf("%d failed attempts recorded", n)
	}
}
