package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// createDueJob creates a one-time job due now; it reports errors with
// t.Error, so it may run off the test's goroutine.
func createDueJob(t *testing.T, jobs *job.Service, name, handler string) {
	t.Helper()
	createRetriedJob(t, jobs, name, handler, nil)
}

// createRetriedJob is createDueJob with the step's retry policy (nil: the
// default).
func createRetriedJob(t *testing.T, jobs *job.Service, name, handler string, retry *dag.Retry) {
	t.Helper()
	ctx := context.Background()
	now, err := jobs.Now(ctx)
	if err != nil {
		t.Error(err)
		return
	}
	_, err = jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{At: now.Format(time.RFC3339)}, Run: &dag.Executor{Handler: handler},
		Defaults: dag.StepDefaults{Retry: retry},
	}}, "")
	if err != nil {
		t.Error(err)
	}
}

// An attempt that starts while a lease renewal is in flight is not in
// that renewal's answer, and must not be cancelled for it (the heartbeat
// once cancelled every running attempt missing from the answer). The
// renewal failpoint holds the heartbeat between the renewal and its
// cancellations until a second attempt has started.
func TestAttemptStartedDuringRenewalIsNotCancelled(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.StartNode(t, pool)

	release := make(chan struct{})
	lateStarted := make(chan struct{})
	var cancelled atomic.Int32
	hold := func(started chan<- struct{}) executor.HandlerFunc {
		return func(ctx context.Context, _ executor.Call) error {
			if started != nil {
				close(started)
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				cancelled.Add(1)
				return ctx.Err()
			}
		}
	}
	var renewals atomic.Int32
	var once sync.Once
	fp := failpoint.New()
	fp.On(worker.FailpointRenewed, func() {
		renewals.Add(1)
		once.Do(func() { // the first renewal, with only "early" running
			createDueJob(t, jobs, "late", "late")
			select {
			case <-lateStarted:
			case <-time.After(30 * time.Second):
				t.Error("the late attempt did not start")
			}
		})
	})
	// A lease of 9 s: the early attempt's lease is not renewed while the
	// failpoint holds the heartbeat, which lasts until the late attempt
	// started (a job created, fired, fetched and started).
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 4}, LeaseTTL: 9 * time.Second,
		Failpoints: fp, Handlers: map[string]executor.HandlerFunc{"early": hold(nil), "late": hold(lateStarted)}})
	createDueJob(t, jobs, "early", "early")

	enginetest.WaitFor(t, 30*time.Second, "a renewal after the late attempt started", func() bool { return renewals.Load() >= 2 })
	close(release)
	enginetest.WaitFor(t, 20*time.Second, "both runs succeed", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE status = 'succeeded'") == 2
	})
	if n := cancelled.Load(); n != 0 {
		t.Fatalf("%d attempts were cancelled while their lease was ours", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM attempts"); n != 2 {
		t.Fatalf("%d attempts, want 2 (one per run)", n)
	}
}

// The check of a worker's attempts never waits for a row lock, so it
// cannot deadlock with a report or a start holding some of the same tasks:
// here a transaction holds task B (as a report batch would) while the check
// of A and B runs; the check returns at once (both still ours). A task
// cancelled meanwhile is no longer ours; when the worker's lease lapses,
// the reaper finds its running tasks.
func TestCheckDoesNotWaitForTasksHeldByOthers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	wid, a, b := startTwoAttempts(t, pool)

	// READ COMMITTED, as a PostgreSQL deployment runs.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "UPDATE tasks SET last_error = 'reporting' WHERE id = $1", b.Call.TaskID); err != nil {
		t.Fatal(err)
	}
	check := func() []uuid.UUID {
		t.Helper()
		checkCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		held, err := store.New(pool).RunningOn(checkCtx, &wid)
		if err != nil {
			t.Fatalf("check while another transaction holds a task: %v", err)
		}
		ours := map[uuid.UUID]int64{}
		for _, h := range held {
			ours[h.ID] = h.FencingToken
		}
		var lost []uuid.UUID
		for _, at := range []*run.Attempt{a, b} {
			if tok, ok := ours[at.Call.TaskID]; !ok || tok != at.Call.FencingToken {
				lost = append(lost, at.Call.TaskID)
			}
		}
		return lost
	}
	if lost := check(); len(lost) != 0 {
		t.Fatalf("check answered %v lost; want both still ours", lost)
	}
	if _, err := tx.Exec(ctx, "UPDATE tasks SET last_error = 'reporting' WHERE id = $1", a.Call.TaskID); err != nil {
		t.Fatalf("the holder then updates A: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE tasks SET status = 'cancelled' WHERE id = $1", a.Call.TaskID); err != nil {
		t.Fatal(err)
	}
	if lost := check(); len(lost) != 1 || lost[0] != a.Call.TaskID {
		t.Fatalf("check answered %v lost; want the cancelled A", lost)
	}
	if n := len(expired(t, pool)); n != 0 {
		t.Fatalf("%d expired leases while the worker's lease is live", n)
	}
	if _, err := pool.Exec(ctx, "UPDATE workers SET lease_expires_at = now() - interval '1 second' WHERE id = $1", wid); err != nil {
		t.Fatal(err)
	}
	if got := expired(t, pool); len(got) != 1 || got[0] != b.Call.TaskID {
		t.Fatalf("expired leases %v; want B (the worker's lease lapsed; A is no longer running)", got)
	}
}

func expired(t *testing.T, pool *pgxpool.Pool) []uuid.UUID {
	t.Helper()
	rows, err := store.New(pool).ExpiredLeases(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []uuid.UUID
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

// startTwoAttempts starts one attempt on each of two one-task runs, on
// a worker "w" registered with a one-minute lease, and returns its id.
func startTwoAttempts(t *testing.T, pool *pgxpool.Pool) (uuid.UUID, *run.Attempt, *run.Attempt) {
	t.Helper()
	ctx := context.Background()
	wid := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at)
		VALUES ($1, 'w', '{"default": 1}', now(), now(), now() + interval '1 minute')`, wid); err != nil {
		t.Fatal(err)
	}
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	runs := run.NewService(pool, jobs, d)
	var starts []run.Start
	for _, name := range []string{"a", "b"} {
		_, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: dag.JobSpec{
			Schedule: schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}, Run: &dag.Executor{Handler: "noop"}}}, "")
		if err != nil {
			t.Fatal(err)
		}
		r, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: name}, "", false)
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, run.Start{TaskID: enginetest.UUID(t, pool, "SELECT id FROM tasks WHERE run_id = $1", r.ID), Attempt: 1})
	}
	got, err := run.StartAttempts(ctx, pool, starts, run.Worker{Name: "w", ID: wid})
	if err != nil || got[0] == nil || got[1] == nil {
		t.Fatal("start attempts:", got, errors.Join(err))
	}
	return wid, got[0], got[1]
}

// An attempt whose report is lost (here the work call panics right before
// it; a report failing past its retries ends the same way) stays running
// in the database on a worker whose lease never lapses: the reaper cannot
// see it. The worker's own check finds it held there by no call and
// reports it, so the task retries instead of hanging while the worker
// lives.
func TestLostReportIsRecovered(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.StartNode(t, pool)
	fp := failpoint.New()
	fp.At(worker.FailpointReporting, 1, func() { panic("the report is lost") })
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 2}, LeaseTTL: 3 * time.Second,
		Failpoints: fp, Handlers: map[string]executor.HandlerFunc{"ok": func(context.Context, executor.Call) error { return nil }}})
	createRetriedJob(t, jobs, "lost", "ok", &dag.Retry{MaxAttempts: 3})
	enginetest.WaitFor(t, 30*time.Second, "the run succeeds", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE status = 'succeeded'") == 1
	})
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM attempts WHERE number = 1 AND outcome = 'failed'
		AND exit_reason = 'lease_expired' AND error LIKE '%lost the attempt''s report%'`); n != 1 {
		t.Fatalf("attempt 1 not recorded as a lost report (%d rows)", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM attempts WHERE number = 2 AND outcome = 'succeeded'"); n != 1 {
		t.Fatalf("attempt 2 did not succeed (%d rows)", n)
	}
}

// A report the database refuses for good (here a constraint on the
// attempt's error, standing for any content it will not store) does not
// leave its attempt running: the worker reports it failed instead, saying
// why, and the task retries.
func TestRefusedReportEndsTheAttempt(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "ALTER TABLE attempts ADD CONSTRAINT test_refuse CHECK (error NOT LIKE '%refuse me%')"); err != nil {
		t.Fatal(err)
	}
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.StartNode(t, pool)
	var calls atomic.Int32
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 2}, LeaseTTL: 3 * time.Second,
		Handlers: map[string]executor.HandlerFunc{"once": func(context.Context, executor.Call) error {
			if calls.Add(1) == 1 {
				return errors.New("refuse me")
			}
			return nil
		}}})
	createRetriedJob(t, jobs, "refused", "once", &dag.Retry{MaxAttempts: 3, Initial: dag.D(time.Second)})
	enginetest.WaitFor(t, 30*time.Second, "the run succeeds", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE status = 'succeeded'") == 1
	})
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM attempts WHERE number = 1 AND outcome = 'failed'
		AND error LIKE 'the attempt''s report was refused by the database: %'`); n != 1 {
		t.Fatalf("attempt 1 not recorded as a refused report (%d rows)", n)
	}
}

// The reports a worker still keeps at shutdown (they failed, and the
// orphan check has not sent them again yet) are sent one per transaction:
// one the database refuses for good does not roll back the others, whose
// attempts would then end as lease_expired and run again. Here a
// successful attempt's report fails while a constraint blocks it, and a
// second attempt's is refused for its error text; the worker stops before
// its orphan check. The success is recorded as one; the refused report
// ends its attempt with the same outcome, its text replaced by the
// refusal.
func TestShutdownSendsEachKeptReportAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	for _, s := range []string{
		"ALTER TABLE attempts ADD CONSTRAINT test_refuse CHECK (error NOT LIKE '%refuse me%')",
		"ALTER TABLE attempts ADD CONSTRAINT test_block CHECK (outcome <> 'succeeded')", // until dropped below
	} {
		if _, err := pool.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.StartNode(t, pool)
	var ran atomic.Int32
	w, err := worker.New(worker.Config{StatePool: pool, Queues: map[string]int{"default": 2}, LeaseTTL: 30 * time.Second,
		Handlers: map[string]executor.HandlerFunc{
			"good": func(context.Context, executor.Call) error { ran.Add(1); return nil },
			"bad":  func(context.Context, executor.Call) error { ran.Add(1); return errors.New("refuse me") },
		}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	for _, n := range []string{"good", "bad"} {
		createRetriedJob(t, jobs, n, n, &dag.Retry{MaxAttempts: 1})
	}
	enginetest.WaitFor(t, 20*time.Second, "both handlers ran", func() bool { return ran.Load() == 2 })
	time.Sleep(time.Second) // their reports fail (test_block, test_refuse) and are kept
	if _, err := pool.Exec(ctx, "ALTER TABLE attempts DROP CONSTRAINT test_block"); err != nil {
		t.Fatal(err)
	}
	stop() // long before the orphan check (two beats of a 30 s lease)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	outcome := func(name string) (outcome, errText string) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT a.outcome, a.error FROM attempts AS a JOIN tasks AS t ON t.id = a.task_id
			JOIN runs AS r ON r.id = t.run_id JOIN jobs AS j ON j.id = r.job_id WHERE j.name = $1`, name).Scan(&outcome, &errText); err != nil {
			t.Fatal(err)
		}
		return outcome, errText
	}
	if o, _ := outcome("good"); o != "succeeded" {
		t.Errorf("the good attempt ended %q; its report was lost at shutdown", o)
	}
	if o, e := outcome("bad"); o != "failed" || !strings.HasPrefix(e, "the attempt's report was refused by the database: ") {
		t.Errorf("the refused attempt ended %q with error %q; want failed, saying its report was refused", o, e)
	}
}

// A start that committed while its answer was lost (the connection cut at
// COMMIT) does not leave its attempt running with nothing executing it
// until the orphan check fails it, using up an attempt: tried again (the
// batch served once more, or River retrying the job), the worker finds
// the task running its attempt on this worker and runs it there, once.
func TestLostStartAnswerRunsTheAttemptOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.StartNode(t, pool)
	fp := failpoint.New()
	fp.ErrAt(worker.FailpointStartCommitted, 1, errors.New("connection cut at COMMIT"))
	calls := map[string]*atomic.Int32{}
	for _, n := range []string{"a", "b", "c"} {
		calls[n] = &atomic.Int32{}
	}
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 3}, LeaseTTL: 30 * time.Second,
		Failpoints: fp, Handlers: map[string]executor.HandlerFunc{"count": func(_ context.Context, c executor.Call) error {
			calls[c.Job].Add(1)
			return nil
		}}})
	for n := range calls {
		createRetriedJob(t, jobs, n, "count", &dag.Retry{MaxAttempts: 1})
	}
	enginetest.WaitFor(t, 30*time.Second, "the three runs succeed", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE status = 'succeeded'") == 3
	})
	for n, c := range calls {
		if got := c.Load(); got != 1 {
			t.Errorf("job %s's step ran %d times; want once", n, got)
		}
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM attempts WHERE number = 1 AND outcome = 'succeeded'"); n != 3 {
		t.Fatalf("%d first attempts succeeded; want 3", n)
	}
}

// A success the database refuses for something other than its text (here
// a constraint on the outcome itself, standing for a guard of the
// engine's own state) does not keep its attempt running for as long as
// the worker lives: sent again without its text, it is refused again, and
// then the attempt ends as a retryable failure saying why.
func TestRefusedSuccessEndsTheAttempt(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "ALTER TABLE attempts ADD CONSTRAINT test_block CHECK (outcome <> 'succeeded')"); err != nil {
		t.Fatal(err)
	}
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.StartNode(t, pool)
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 1}, LeaseTTL: 1500 * time.Millisecond,
		Handlers: map[string]executor.HandlerFunc{"ok": func(context.Context, executor.Call) error { return nil }}})
	createRetriedJob(t, jobs, "s", "ok", &dag.Retry{MaxAttempts: 1})
	enginetest.WaitFor(t, 20*time.Second, "the attempt ends", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM attempts WHERE outcome <> 'running'") == 1
	})
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM attempts WHERE outcome = 'failed'
		AND error LIKE 'the attempt''s report was refused by the database: %test_block%'`); n != 1 {
		t.Fatal("the attempt did not end as a failure naming the refusal")
	}
}
