package main_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/event"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	orun "github.com/orrery-dev/orrery/internal/run"
)

// Crash tests: each stops a real orrery process at an exact point of its
// work through a failpoint (ORRERY_FAILPOINTS), not by timing a signal.

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stopped reports whether the process is stopped (SIGSTOP).
func (p *proc) stopped() bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'T'
}

func openPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// workerProc runs `orrery worker` on queue default with a 2 s lease.
func workerProc(t *testing.T, dsn, name string, env ...string) *proc {
	return startProcEnv(t, name, env, "worker", "--db", dsn, "--queue", "default=2", "--name", name,
		"--lease-ttl", "2s", "--allow-command", "/bin/*", "--log-level", "info")
}

// createCommandJob creates a one-time job due now that runs argv, with
// quick retries.
func createCommandJob(t *testing.T, pool *pgxpool.Pool, name string, argv ...string) {
	t.Helper()
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = jobs.Create(ctx, job.Anonymous, dag.Resource{
		Metadata: dag.Metadata{Name: name},
		Spec: dag.JobSpec{
			Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)},
			Run:      &dag.Executor{Command: &dag.CommandExecutor{Argv: argv}},
			Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 3, Initial: dag.D(100 * time.Millisecond), Max: dag.D(200 * time.Millisecond)}},
		},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
}

func runStatus(t *testing.T, pool *pgxpool.Pool, jobName, status string) bool {
	return queryInt(t, pool, `SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = $1 AND r.status = $2`, jobName, status) == 1
}

// attemptsOf lists "worker:outcome" of a job's attempts, in order.
func attemptsOf(t *testing.T, pool *pgxpool.Pool, jobName string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT a.worker || ':' || a.outcome FROM attempts a JOIN tasks t ON t.id = a.task_id
		JOIN runs r ON r.id = t.run_id JOIN jobs j ON j.id = r.job_id WHERE j.name = $1 ORDER BY a.number`, jobName)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// A worker killed between River's fetch and the attempt's start leaves
// the task queued with no attempt and no lease, while River holds its job
// as running (River would rescue it only after an hour). Once the dead
// worker's lease lapses, the reaper delivers it again: here within the
// 2 s lease plus the 1 s reaper interval, and one attempt runs, on the
// live worker.
func TestWorkerKilledBetweenFetchAndStart(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	startNodeProc(t, dsn, "node")
	w1 := workerProc(t, dsn, "w1", "ORRERY_FAILPOINTS=worker/fetched=kill")
	createCommandJob(t, pool, "fetched", "/bin/true")
	poll(t, 30*time.Second, "w1 fetches the job and dies", w1.exited)
	if n := queryInt(t, pool, "SELECT count(*) FROM tasks WHERE status = 'queued' AND attempt = 0"); n != 1 {
		t.Fatalf("%d queued tasks without an attempt after the kill, want 1 (stranded)", n)
	}
	workerProc(t, dsn, "w2")
	took := poll(t, 20*time.Second, "the task is delivered again and succeeds on w2", func() bool { return runStatus(t, pool, "fetched", "succeeded") })
	t.Logf("stranded task succeeded %s after its worker was killed (lease TTL 2 s, reaper interval 1 s)", took.Round(100*time.Millisecond))
	if got := attemptsOf(t, pool, "fetched"); len(got) != 1 || got[0] != "w2:succeeded" {
		t.Fatalf("attempts %v, want [w2:succeeded]", got)
	}
}

// The same for a retrying task: attempt 1 fails, and the worker is killed
// right after fetching attempt 2's River job.
func TestWorkerKilledAfterFetchingARetry(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	startNodeProc(t, dsn, "node")
	w1 := workerProc(t, dsn, "w1", "ORRERY_FAILPOINTS=worker/fetched=kill@2")
	createCommandJob(t, pool, "retried", "/bin/sh", "-c", `[ "$ORRERY_ATTEMPT" != 1 ]`)
	poll(t, 30*time.Second, "w1 runs attempt 1, fetches attempt 2 and dies", w1.exited)
	if n := queryInt(t, pool, "SELECT count(*) FROM tasks WHERE status = 'retrying' AND attempt = 1"); n != 1 {
		t.Fatalf("%d retrying tasks after the kill, want 1 (stranded)", n)
	}
	workerProc(t, dsn, "w2")
	took := poll(t, 30*time.Second, "attempt 2 is delivered again and succeeds on w2", func() bool { return runStatus(t, pool, "retried", "succeeded") })
	t.Logf("stranded retry succeeded %s after its worker was killed", took.Round(100*time.Millisecond))
	if got := attemptsOf(t, pool, "retried"); len(got) != 2 || got[0] != "w1:failed" || got[1] != "w2:succeeded" {
		t.Fatalf("attempts %v, want [w1:failed w2:succeeded]", got)
	}
}

// A worker stopped (SIGSTOP) between fetch and start: its task is
// delivered again and runs elsewhere; when the worker resumes, its start
// finds the attempt taken and does nothing. One attempt in all.
func TestWorkerStoppedBetweenFetchAndStart(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	startNodeProc(t, dsn, "node")
	w1 := workerProc(t, dsn, "w1", "ORRERY_FAILPOINTS=worker/fetched=stop")
	createCommandJob(t, pool, "paused", "/bin/true")
	poll(t, 30*time.Second, "w1 fetches the job and stops", w1.stopped)
	workerProc(t, dsn, "w2")
	poll(t, 20*time.Second, "the task is delivered again and succeeds on w2", func() bool { return runStatus(t, pool, "paused", "succeeded") })
	w1.signal(t, syscall.SIGCONT)
	poll(t, 20*time.Second, "w1 resumes and finds its attempt taken", func() bool {
		return strings.Contains(w1.Logs(), "stale River job")
	})
	if got := attemptsOf(t, pool, "paused"); len(got) != 1 || got[0] != "w2:succeeded" {
		t.Fatalf("attempts %v, want [w2:succeeded]", got)
	}
}

// A node stopped inside its firing transaction holds the shard fence's
// row locks, which a claim skips. The pools end a session idle in a
// transaction after half the shortest lease (--idle-tx-timeout), so the
// other node takes every shard soon after the stopped node's lease lapses,
// and fires its jobs.
func TestNodeStoppedInsideFiringTransactionLosesShards(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	n1 := startProcEnv(t, "node-1", []string{"ORRERY_FAILPOINTS=scheduler/fire-tx=stop"},
		"serve", "--db", dsn, "--addr", "127.0.0.1:0", "--node-name", "node-1", "--shard-ttl", "2s", "--log-level", "info")
	poll(t, 20*time.Second, "node-1 owns every shard", func() bool { return allShardsLive(t, pool, "none") })
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "tick"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("* * * * * *")}, Overlap: dag.OverlapAllow, Run: &dag.Executor{Handler: "noop"}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	poll(t, 20*time.Second, "node-1 stops inside its firing transaction", n1.stopped)
	startNodeProc(t, dsn, "node-2")
	took := poll(t, 20*time.Second, "node-2 owns every shard while node-1 is stopped", func() bool { return allShardsLive(t, pool, "node-1") })
	t.Logf("node-2 owned every shard %s after it started (shard TTL 2 s)", took.Round(100*time.Millisecond))
	poll(t, 10*time.Second, "node-2 fires the job", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs r JOIN nodes n ON n.id = r.node_id WHERE n.name = 'node-2'") > 0
	})
	n1.signal(t, syscall.SIGCONT)
	poll(t, 20*time.Second, "node-1 notices it lost its shards", func() bool { return strings.Contains(n1.Logs(), "shard lost") })
}

// A node SIGKILLed inside a backfill's transaction (its runs and cursor
// written, not committed) loses that step; the node that takes its shards
// goes on from the last committed cursor: every instant of the range gets
// exactly one run, none doubled, none lost.
func TestNodeKilledInsideABackfill(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	n1, jobs := nodeToKill(t, dsn, pool, "scheduler/backfill-tx=kill@3")
	ctx := context.Background()
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "hourly"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("0 * * * *")}, Run: &dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}}}, ""); err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := orun.NewService(pool, jobs, nil).Backfill(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "hourly"},
		orun.BackfillOptions{From: from, To: from.Add(47 * time.Hour), MaxConcurrent: 4})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "node-1 killed in its third backfill step", n1.exited)
	if n := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN nodes n ON n.id = r.node_id WHERE n.name = 'node-1' AND r.trigger = 'backfill'"); n == 0 {
		t.Fatalf("node-1 exited before it committed a backfill step:\n%s", n1.Logs())
	}
	startNodeProc(t, dsn, "node-2")
	poll(t, 90*time.Second, "node-2 finishes the backfill and its runs", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM backfills WHERE id = $1 AND status = 'done'", b.ID) == 1 &&
			queryInt(t, pool, "SELECT count(*) FROM runs WHERE finished_at IS NULL") == 0
	})
	if n := queryInt(t, pool, "SELECT count(DISTINCT scheduled_for) FROM runs WHERE trigger = 'backfill' AND status = 'succeeded'"); n != 48 {
		t.Errorf("%d instants with a succeeded backfill run, want 48", n)
	}
	if n := queryInt(t, pool, "SELECT created FROM backfills WHERE id = $1", b.ID); n != 48 {
		t.Errorf("the backfill counts %d runs written, want 48", n)
	}
}

// A node SIGKILLed inside the transaction that turns upstream runs' ends
// into downstream runs (failpoint scheduler/downstream-tx) writes none of
// them; the next owner of the shard does, once each: every ended run of
// the upstream job has exactly one run of the job after it.
func TestNodeKilledStartingDownstreamRuns(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	n1, jobs := nodeToKill(t, dsn, pool, "scheduler/downstream-tx=kill@3")
	ctx := context.Background()
	true_ := &dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}
	up, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "up"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("* * * * * *")}, Overlap: dag.OverlapAllow, Run: true_}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err = jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "down"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{After: &schedule.After{Job: "up"}}, Overlap: dag.OverlapAllow, Misfire: dag.MisfireBackfill, MaxBackfill: 1000, Run: true_}}, ""); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "node-1 killed in its third downstream step", n1.exited)
	if n := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN nodes n ON n.id = r.node_id WHERE n.name = 'node-1' AND r.trigger = 'upstream'"); n == 0 {
		t.Fatalf("node-1 exited before it committed a downstream step:\n%s", n1.Logs())
	}
	startNodeProc(t, dsn, "node-2")
	poll(t, 30*time.Second, "node-2 starts downstream runs", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs r JOIN nodes n ON n.id = r.node_id WHERE n.name = 'node-2' AND r.trigger = 'upstream'") >= 3
	})
	if _, err := jobs.Pause(ctx, job.Anonymous, job.Ref{ID: up.ID}); err != nil {
		t.Fatal(err)
	}
	poll(t, 60*time.Second, "every run ended and every event turned into runs", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE finished_at IS NULL") == 0 &&
			queryInt(t, pool, "SELECT count(*) FROM upstream_finishes") == 0
	})
	ended := queryInt(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1 AND status = 'succeeded'", up.ID)
	if n := queryInt(t, pool, `SELECT count(*) FROM runs AS u WHERE u.job_id = $1 AND u.status = 'succeeded'
		AND (SELECT count(*) FROM runs AS d WHERE d.trigger = 'upstream' AND d.upstream->>'id' = u.id::text) <> 1`, up.ID); n != 0 || ended < 5 {
		t.Errorf("%d of %d ended upstream runs have no downstream run or more than one", n, ended)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM runs WHERE trigger = 'upstream' AND status <> 'succeeded'"); n != 0 {
		t.Errorf("%d downstream runs did not succeed", n)
	}
}

// nodeToKill starts node-1 with a failpoint (ORRERY_FAILPOINTS's form,
// such as scheduler/backfill-tx=kill@3) and a worker, waits until node-1
// owns every shard, and returns it with a job service on the database.
func nodeToKill(t *testing.T, dsn string, pool *pgxpool.Pool, failpoint string) (*proc, *job.Service) {
	t.Helper()
	n1 := startProcEnv(t, "node-1", []string{"ORRERY_FAILPOINTS=" + failpoint},
		"serve", "--db", dsn, "--addr", "127.0.0.1:0", "--node-name", "node-1", "--shard-ttl", "2s", "--log-level", "info")
	workerProc(t, dsn, "w1")
	poll(t, 20*time.Second, "node-1 owns every shard", func() bool { return allShardsLive(t, pool, "none") })
	jobs, err := job.New(context.Background(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n1, jobs
}

// A node SIGKILLed inside the transaction that turns pending events into
// runs (failpoint scheduler/events-tx) writes none of them; the next
// owner of the shard does, once each: every event, published while the
// nodes die and start, starts exactly one run of the job it names.
func TestNodeKilledStartingEventRuns(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	n1, jobs := nodeToKill(t, dsn, pool, "scheduler/events-tx=kill@3")
	ctx := context.Background()
	true_ := &dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "on-paid"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Event: &schedule.Event{Type: "order.paid"}}, Overlap: dag.OverlapAllow, Misfire: dag.MisfireBackfill, MaxBackfill: 1000, Run: true_}}, ""); err != nil {
		t.Fatal(err)
	}
	publishing, stop := context.WithCancel(ctx)
	defer stop()
	published := make(chan int, 1)
	go func() {
		n := 0
		defer func() { published <- n }()
		for publishing.Err() == nil {
			// Each event twice: a provider's retry starts nothing more.
			for range 2 {
				if _, err := event.Publish(ctx, pool, job.DefaultTenant, jobs.Shards(), event.Event{Type: "order.paid", ID: fmt.Sprintf("e-%d", n),
					Data: []byte(fmt.Sprintf(`{"n": %d}`, n))}); err != nil {
					t.Error(err)
					return
				}
			}
			n++
			time.Sleep(50 * time.Millisecond)
		}
	}()
	poll(t, 30*time.Second, "node-1 killed in its third events step", n1.exited)
	if n := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN nodes n ON n.id = r.node_id WHERE n.name = 'node-1' AND r.trigger = 'event'"); n == 0 {
		t.Fatalf("node-1 exited before it committed an events step:\n%s", n1.Logs())
	}
	startNodeProc(t, dsn, "node-2")
	poll(t, 30*time.Second, "node-2 starts event runs", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs r JOIN nodes n ON n.id = r.node_id WHERE n.name = 'node-2' AND r.trigger = 'event'") >= 3
	})
	stop()
	sent := <-published
	poll(t, 60*time.Second, "every event turned into its run", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM events WHERE pending") == 0
	})
	if n := queryInt(t, pool, "SELECT count(*) FROM events"); n != sent || sent < 5 {
		t.Errorf("%d events written of %d published (each twice)", n, sent)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM events AS e WHERE (SELECT count(*) FROM runs AS r WHERE r.event_id = e.id) <> 1`); n != 0 {
		t.Errorf("%d of %d events have no run or more than one", n, sent)
	}
}

// A sleeping step survives its scheduler: node-1 is SIGKILLed inside the
// transaction that wakes the step (failpoint run/parked-woken, after the
// step's end and its child's release are written, before commit), which
// therefore writes nothing; node-2, started after it, wakes the step
// once. The step has one attempt, the step after it runs once, and the
// run succeeds.
func TestSleepAcrossSchedulerRestart(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	n1, jobs := nodeToKill(t, dsn, pool, "run/parked-woken=kill@1")
	ctx := context.Background()
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "nap"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{
			{Name: "nap", Sleep: &dag.Sleep{For: 2 * time.Second}},
			{Name: "after", Needs: []string{"nap"}, Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}},
		}}}, ""); err != nil {
		t.Fatal(err)
	}
	r, err := orun.NewService(pool, jobs, nil).Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "nap"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "node-1 killed waking the step", n1.exited)
	if n := queryInt(t, pool, "SELECT count(*) FROM parked_steps WHERE run_id = $1", r.ID); n != 1 {
		t.Fatalf("after the kill: %d parked rows, want the step's still there", n)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM tasks WHERE run_id = $1 AND status = 'running' AND step = 'nap'", r.ID); n != 1 {
		t.Fatal("after the kill the step is no longer running: the killed transaction wrote something")
	}
	startNodeProc(t, dsn, "node-2")
	poll(t, 60*time.Second, "node-2 wakes the step and the run succeeds", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE id = $1 AND status = 'succeeded'", r.ID) == 1
	})
	if n := queryInt(t, pool, "SELECT count(*) FROM every_attempt AS a JOIN tasks AS t ON t.id = a.task_id WHERE t.run_id = $1 AND t.step = 'nap'", r.ID); n != 1 {
		t.Errorf("the step has %d attempts, want 1", n)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM every_attempt AS a JOIN tasks AS t ON t.id = a.task_id WHERE t.run_id = $1 AND t.step = 'after'", r.ID); n != 1 {
		t.Errorf("the step after it ran %d times, want once", n)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM parked_steps WHERE run_id = $1", r.ID); n != 0 {
		t.Errorf("%d parked rows left", n)
	}
}

// A waiting step survives the node that takes its event: node-1 is
// SIGKILLed inside the events step's transaction once the wait's end is
// written (failpoint run/waits-ended), which therefore writes nothing;
// node-2 takes the event again and ends the wait once: one attempt, the
// event as its output, the step after it run once.
func TestWaitAcrossAKilledEventsStep(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	n1, jobs := nodeToKill(t, dsn, pool, "run/waits-ended=kill@1")
	ctx := context.Background()
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "ship"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{
			{Name: "shipped", Wait: &dag.Wait{Event: "order.shipped", Timeout: dag.D(time.Hour)}},
			{Name: "after", Needs: []string{"shipped"}, Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/echo", "${{ steps.shipped.output.id }}"}}}},
		}}}, ""); err != nil {
		t.Fatal(err)
	}
	r, err := orun.NewService(pool, jobs, nil).Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "ship"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "the wait parks", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM parked_steps WHERE run_id = $1", r.ID) == 1
	})
	if _, err := event.Publish(ctx, pool, job.DefaultTenant, jobs.Shards(), event.Event{Type: "order.shipped", ID: "s-1", Data: []byte(`{"order": 1}`)}); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "node-1 killed ending the wait", n1.exited)
	if n := queryInt(t, pool, "SELECT count(*) FROM parked_steps WHERE run_id = $1", r.ID); n != 1 {
		t.Fatalf("after the kill: %d parked rows, want the wait's still there", n)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM events WHERE pending"); n != 1 {
		t.Fatalf("after the kill: %d events pending, want the one the killed transaction took", n)
	}
	startNodeProc(t, dsn, "node-2")
	poll(t, 60*time.Second, "node-2 ends the wait and the run succeeds", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE id = $1 AND status = 'succeeded'", r.ID) == 1
	})
	if n := queryInt(t, pool, `SELECT count(*) FROM every_attempt AS a JOIN tasks AS t ON t.id = a.task_id
		WHERE t.run_id = $1 AND t.step = 'shipped' AND a.output LIKE '%"id":"s-1"%'`, r.ID); n != 1 {
		t.Errorf("the wait has %d attempts with the event as output, want 1", n)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM every_attempt AS a JOIN tasks AS t ON t.id = a.task_id WHERE t.run_id = $1", r.ID); n != 2 {
		t.Errorf("%d attempts in the run, want 2", n)
	}
}
