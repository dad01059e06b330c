package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/store"
)

// These tests call work, orphans and reportOrphans themselves, in the
// orders River and the heartbeat could: a worker registered (its lease
// taken) whose River client never runs, a node firing one due job, and
// its queued task. (enginetest starts workers: it cannot serve a test
// inside this package.)
func adoptSetup(t *testing.T, maxAttempts int, fp *failpoint.Set, h executor.HandlerFunc) (*pgxpool.Pool, *Worker, uuid.UUID) {
	t.Helper()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	nctx, stop := context.WithCancel(ctx)
	n, err := node.New(nctx, node.Config{Pool: pool, Dispatcher: d, ShardTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { _ = n.Run(nctx); close(stopped) }()
	t.Cleanup(func() { stop(); <-stopped })
	w, err := New(Config{StatePool: pool, Queues: map[string]int{"default": 2}, LeaseTTL: 30 * time.Second,
		Failpoints: fp, Handlers: map[string]executor.HandlerFunc{"h": h}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.beat(ctx); err != nil {
		t.Fatal(err)
	}
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	now, err := jobs.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "j"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{At: now.Format(time.RFC3339)}, Run: &dag.Executor{Handler: "h"},
		Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: maxAttempts}},
	}}, ""); err != nil {
		t.Fatal(err)
	}
	var task uuid.UUID
	waitFor(t, "a queued task", func() bool {
		return store.Retry(ctx, func() error {
			return pool.QueryRow(ctx, "SELECT id FROM tasks WHERE status = 'queued'").Scan(&task)
		}) == nil
	})
	return pool, w, task
}

// waitFor waits up to 20 s for ok.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20 s: %s", what)
		}
	}
}

func taskJob(task uuid.UUID, attempt int) *river.Job[dispatch.TaskArgs] {
	return &river.Job[dispatch.TaskArgs]{JobRow: &rivertype.JobRow{ID: 1}, Args: dispatch.TaskArgs{TaskID: task, Attempt: attempt}}
}

// failFirstAttempt is a handler that counts its calls by attempt and
// fails attempt 1 (retryably).
func failFirstAttempt(calls *[3]atomic.Int32) executor.HandlerFunc {
	return func(_ context.Context, c executor.Call) error {
		calls[c.Attempt].Add(1)
		if c.Attempt == 1 {
			return errors.New("attempt 1 fails, retryably")
		}
		return nil
	}
}

// check is one check of running tasks as the heartbeat makes it: its
// number, then the database's read.
func check(t *testing.T, pool *pgxpool.Pool, w *Worker) ([]store.RunningOnRow, uint64) {
	t.Helper()
	n := w.beginCheck()
	held, err := store.New(pool).RunningOn(context.Background(), &w.id)
	if err != nil {
		t.Fatal(err)
	}
	return held, n
}

// An attempt the orphan check has decided to report (its start's answer
// was lost, and no call held it at two checks) is not taken up by a River
// retry of its job arriving while that report is on its way: the step
// runs once, not once adopted and once more as the next attempt.
func TestOrphanReportedIsNotAdopted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fp := failpoint.New()
	var calls atomic.Int32
	gate := make(chan struct{})
	pool, w, task := adoptSetup(t, 2, fp, func(context.Context, executor.Call) error {
		calls.Add(1)
		<-gate
		return nil
	})
	defer close(gate)
	fp.ErrAt(FailpointStartCommitted, 1, errors.New("connection cut at COMMIT"))
	if err := w.work(ctx, taskJob(task, 1)); err == nil {
		t.Fatal("want the lost start answer")
	}
	if r := w.orphans(check(t, pool, w)); len(r) != 0 {
		t.Fatalf("the first check reported %d", len(r))
	}
	reports := w.orphans(check(t, pool, w))
	if len(reports) != 1 {
		t.Fatalf("the second check reported %d orphans, want 1", len(reports))
	}
	retried := make(chan error, 1)
	go func() { retried <- w.work(ctx, taskJob(task, 1)) }() // River's retry, now
	select {
	case err := <-retried:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("River's retry ran the step (%d calls) of an attempt the orphan check reports", calls.Load())
	}
	w.reportOrphans(ctx, reports)
	second := make(chan error, 1)
	go func() { second <- w.work(ctx, taskJob(task, 2)) }()
	waitFor(t, "attempt 2's step", func() bool { return calls.Load() >= 1 })
	if n := calls.Load(); n != 1 {
		t.Errorf("the step ran %d times; want once (attempt 2)", n)
	}
	gate <- struct{}{}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}

// A check whose read of the database began before an attempt started
// does not make the worker forget that the attempt's step began here:
// its report failed, River retries the job, and the step is not run again
// in this process.
func TestStaleCheckKeepsBegunAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var calls atomic.Int32
	pool, w, task := adoptSetup(t, 1, nil, func(context.Context, executor.Call) error {
		calls.Add(1)
		return nil
	})
	if _, err := pool.Exec(ctx, "ALTER TABLE attempts ADD CONSTRAINT test_block CHECK (outcome <> 'succeeded')"); err != nil {
		t.Fatal(err)
	}
	held, n := check(t, pool, w) // read before the start
	if err := w.work(ctx, taskJob(task, 1)); err == nil {
		t.Fatal("want the report to fail")
	}
	w.orphans(held, n) // the same check, after the call ended
	if _, err := pool.Exec(ctx, "ALTER TABLE attempts DROP CONSTRAINT test_block"); err != nil {
		t.Fatal(err)
	}
	_ = w.work(ctx, taskJob(task, 1)) // River retries the job that returned an error
	if got := calls.Load(); got != 1 {
		t.Errorf("attempt 1's step ran %d times in this process; want once", got)
	}
	if _, ok := w.ledger.unreported[task]; !ok {
		t.Error("the failed report was forgotten by a check that could not see its task")
	}
}

// Two River jobs for one attempt in this process (a redelivery beside the
// one it replaces), in different start batches: the second finds the
// attempt started here, and the first reports it meanwhile; the second
// does not run the step again.
func TestSecondJobForAnAttemptDoesNotRunIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fp := failpoint.New()
	var calls atomic.Int32
	_, w, task := adoptSetup(t, 1, fp, func(context.Context, executor.Call) error {
		calls.Add(1)
		return nil
	})
	report, reported := make(chan struct{}), make(chan struct{})
	fp.At(FailpointReporting, 1, func() { <-report })
	fp.At(FailpointOwnAttempt, 1, func() { close(report); <-reported })
	go func() { _ = w.work(ctx, taskJob(task, 1)); close(reported) }()
	waitFor(t, "the first job's step", func() bool { return calls.Load() >= 1 })
	_ = w.work(ctx, taskJob(task, 1)) // the second job
	if n := calls.Load(); n != 1 {
		t.Errorf("attempt 1's step ran %d times in this process; want once", n)
	}
}

// A check whose read is older than an attempt begun since (the task's next
// attempt) does not report the attempt it read, nor mark it begun in the
// place of the newer one: the newer attempt's River retry would then run
// its step again. Attempt 1's start answer is lost; between a check's read
// and its orphan pass, River retries attempt 1's job (adopted, failed,
// reported), and attempt 2 starts here, runs, and its report fails.
func TestStaleCheckDoesNotReplaceANewerAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fp := failpoint.New()
	var calls [3]atomic.Int32
	pool, w, task := adoptSetup(t, 2, fp, failFirstAttempt(&calls))
	fp.ErrAt(FailpointStartCommitted, 1, errors.New("connection cut at COMMIT"))
	if err := w.work(ctx, taskJob(task, 1)); err == nil {
		t.Fatal("want the lost start answer")
	}
	w.orphans(check(t, pool, w)) // attempt 1 a suspect
	held, n := check(t, pool, w) // the read: attempt 1 held here
	if err := w.work(ctx, taskJob(task, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE attempts ADD CONSTRAINT test_block CHECK (outcome <> 'succeeded')"); err != nil {
		t.Fatal(err)
	}
	if err := w.work(ctx, taskJob(task, 2)); err == nil {
		t.Fatal("want attempt 2's report to fail")
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE attempts DROP CONSTRAINT test_block"); err != nil {
		t.Fatal(err)
	}
	if r := w.orphans(held, n); len(r) != 0 { // the stale pass
		t.Errorf("the stale pass reported %d attempts", len(r))
	}
	_ = w.work(ctx, taskJob(task, 2)) // River retries attempt 2's job
	if got := calls[2].Load(); got != 1 {
		t.Errorf("attempt 2's step ran %d times in this process; want once", got)
	}
}

// A second River job for attempt 1 that found the attempt started here
// (run.OwnAttempt) but comes to run it only after attempt 1 was reported
// and attempt 2 ran here does not run attempt 1's step again.
func TestLateSecondJobAfterTheNextAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fp := failpoint.New()
	var calls [3]atomic.Int32
	_, w, task := adoptSetup(t, 2, fp, failFirstAttempt(&calls))
	report, proceed := make(chan struct{}), make(chan struct{})
	fp.At(FailpointReporting, 1, func() { <-report })
	fp.At(FailpointOwnAttempt, 1, func() { close(report); <-proceed })
	first, second := make(chan struct{}), make(chan struct{})
	go func() { _ = w.work(ctx, taskJob(task, 1)); close(first) }()
	waitFor(t, "the first job's step", func() bool { return calls[1].Load() >= 1 })
	go func() { _ = w.work(ctx, taskJob(task, 1)); close(second) }()
	<-first
	if err := w.work(ctx, taskJob(task, 2)); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	<-second
	if n := calls[1].Load(); n != 1 {
		t.Errorf("attempt 1's step ran %d times in this process; want once", n)
	}
}

// A check whose read predates an adoption (River's retry of the job whose
// start answer was lost) does not report the adopted attempt as lost once
// it has run and succeeded: its stale report would be rejected, but
// recorded on the attempt as a late lease_expired.
func TestStaleCheckAfterAnAdoption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fp := failpoint.New()
	pool, w, task := adoptSetup(t, 2, fp, func(context.Context, executor.Call) error { return nil })
	fp.ErrAt(FailpointStartCommitted, 1, errors.New("connection cut at COMMIT"))
	if err := w.work(ctx, taskJob(task, 1)); err == nil {
		t.Fatal("want the lost start answer")
	}
	w.orphans(check(t, pool, w))                          // a suspect
	held, n := check(t, pool, w)                          // the read: attempt 1 held here, in no call
	if err := w.work(ctx, taskJob(task, 1)); err != nil { // adopted, run, reported
		t.Fatal(err)
	}
	if r := w.orphans(held, n); len(r) != 0 {
		t.Errorf("the stale check reported %d attempts", len(r))
	}
	var outcome, late string
	if err := pool.QueryRow(ctx, "SELECT outcome, COALESCE(late_outcome, '') FROM attempts WHERE task_id = $1", task).Scan(&outcome, &late); err != nil {
		t.Fatal(err)
	}
	if outcome != "succeeded" || late != "" {
		t.Errorf("attempt 1: outcome %q, late outcome %q; want succeeded, none", outcome, late)
	}
}

// A worker that takes its lease for lost while the database still holds
// it (a renewal it saw fail had committed) stops the attempt; a step that
// succeeded all the same is recorded as succeeded, not failed as
// lease_expired by the orphan check after its lost-lease report was
// refused.
func TestMistakenLeaseLossKeepsTheOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stopped := make(chan struct{})
	pool, w, task := adoptSetup(t, 2, nil, func(ctx context.Context, _ executor.Call) error {
		close(stopped)
		<-ctx.Done()
		return nil // the step's work was done: it succeeds anyway
	})
	done := make(chan error, 1)
	go func() { done <- w.work(ctx, taskJob(task, 1)) }()
	<-stopped
	w.ledger.mu.Lock()
	e := w.ledger.running[task]
	w.ledger.mu.Unlock()
	e.cancel(errLeaseLost) // what checkTasks does after a whole TTL of failed renewals
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var status, outcome string
	if err := pool.QueryRow(ctx, "SELECT t.status, a.outcome FROM tasks t JOIN attempts a ON a.task_id = t.id WHERE t.id = $1", task).Scan(&status, &outcome); err != nil {
		t.Fatal(err)
	}
	if status != "succeeded" || outcome != "succeeded" {
		t.Fatalf("task %s, attempt %s; want succeeded, succeeded", status, outcome)
	}
	for range 3 { // the orphan check has nothing to say about it
		if r := w.orphans(check(t, pool, w)); len(r) != 0 {
			t.Fatalf("orphans %+v", r)
		}
	}
}
