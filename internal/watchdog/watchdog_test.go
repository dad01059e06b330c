package watchdog_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/notify"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/watchdog"
	"github.com/orrery-dev/orrery/shard"
)

func TestMain(m *testing.M) {
	// A signing secret the workers of these tests may read for namespace ops.
	_ = os.Setenv("ORRERY_TEST_HOOK_SECRET", "s3cret")
	pgtest.Main(m)
}

// manager holds every shard (the only node), until the test ends.
func manager(t *testing.T, pool *pgxpool.Pool) *shard.Manager {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m, err := shard.NewManager(ctx, pool, shard.Config{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	enginetest.WaitFor(t, 10*time.Second, "every shard held", func() bool { return len(m.Leases()) == shard.DefaultCount })
	return m
}

// sink records the notifications posted to it.
type sink struct {
	*httptest.Server
	mu    sync.Mutex
	got   []received
	fails int // answer 503 to this many first requests
}

type received struct {
	header http.Header
	body   map[string]any
	raw    []byte
}

func newSink(t *testing.T) *sink {
	s := &sink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.fails > 0 {
			s.fails--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		s.got = append(s.got, received{header: r.Header.Clone(), body: m, raw: b})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.got {
		out = append(out, r.header.Get("Orrery-Event"))
	}
	return out
}

func newDog(t *testing.T, pool *pgxpool.Pool, m *shard.Manager) *watchdog.Watchdog {
	t.Helper()
	w, err := watchdog.New(watchdog.Config{Pool: pool, Shards: m, StuckGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func alerts(t *testing.T, pool *pgxpool.Pool, where string) int {
	return enginetest.Int(t, pool, "SELECT count(*) FROM alerts WHERE "+where)
}

// A job whose instant never fired (no scheduler at all) raises missed once
// start_within after the instant, once however many passes see it, tells
// its receivers, and resolves when the job is paused.
func TestMissedWhenNothingFires(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	hook := newSink(t)
	j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "nightly", Namespace: "ops"},
		Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("* * * * * *")}, Run: &dag.Executor{Handler: "h"},
			Alerts: &dag.Alerts{StartWithin: dag.D(5 * time.Second), Notify: []dag.Notify{{Webhook: &dag.Webhook{URL: hook.URL}}}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	dog := newDog(t, pool, manager(t, pool))

	// Due 3 s ago: not yet late.
	if _, err := pool.Exec(ctx, "UPDATE job_schedules SET next_fire_at = date_trunc('second', now()) - interval '3 seconds' WHERE job_id = $1", j.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := dog.Pass(ctx); err != nil || len(res.Raised) != 0 {
		t.Fatalf("raised %v (%v) 3 s after the instant, start_within 5s", res.Raised, err)
	}
	// Due 8 s ago: missed, once.
	if _, err := pool.Exec(ctx, "UPDATE job_schedules SET next_fire_at = next_fire_at - interval '5 seconds' WHERE job_id = $1", j.ID); err != nil {
		t.Fatal(err)
	}
	res, err := dog.Pass(ctx)
	if err != nil || len(res.Raised) != 1 || res.Raised[0].Kind != "missed" || res.Notifications != 1 {
		t.Fatalf("pass: %+v, %v; want one missed alert and one notification", res, err)
	}
	t.Logf("raised: %s", res.Raised[0].Message)
	for range 3 {
		if res, err := dog.Pass(ctx); err != nil || len(res.Raised) != 0 {
			t.Fatalf("raised again: %+v (%v)", res.Raised, err)
		}
	}
	if n := alerts(t, pool, "kind = 'missed' AND resolved_at IS NULL"); n != 1 {
		t.Fatalf("%d open missed alerts, want 1", n)
	}
	if _, err := jobs.Pause(ctx, job.Anonymous, job.Ref{ID: j.ID}); err != nil {
		t.Fatal(err)
	}
	res, err = dog.Pass(ctx)
	if err != nil || len(res.Resolved) != 1 || res.Resolved[0].Resolution != "the job was paused" {
		t.Fatalf("after pause: %+v, %v", res, err)
	}
	// The receivers: delivered by a worker of the job's queue.
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 1},
		AllowEgress: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	enginetest.WaitFor(t, 10*time.Second, "raised and resolved delivered", func() bool { return len(hook.events()) == 2 })
	if ev := hook.events(); ev[0] != "alert.raised" || ev[1] != "alert.resolved" {
		t.Fatalf("events %v", ev)
	}
}

// A failed run raises failure and calls its callback, signed; a run past
// finish_within and an attempt past its timeout raise stuck, resolved
// when they end; a later success resolves the failure.
func TestFailureStuckAndCallbacks(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	runs := run.NewService(pool, jobs, d)
	hook := newSink(t)
	hook.fails = 1 // the first delivery is retried
	release := make(chan struct{})
	var once sync.Once
	unwedge := func() { once.Do(func() { close(release) }) }
	var mode sync.Map
	mode.Store("fail", true)
	handlers := map[string]executor.HandlerFunc{
		"flaky": func(ctx context.Context, c executor.Call) error {
			if v, _ := mode.Load("fail"); v == true {
				return executor.Permanent(errors.New("boom"))
			}
			return nil
		},
		"wedged": func(ctx context.Context, c executor.Call) error {
			<-release // ignores its cancelled context
			return nil
		},
	}
	secrets := executor.SecretPolicy{}
	if err := secrets.AddEnv("default/ops=ORRERY_TEST_HOOK_SECRET"); err != nil {
		t.Fatal(err)
	}
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 4}, Handlers: handlers, Secrets: secrets,
		AllowEgress: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	// Cleanups run last first: registered after the worker's, this one
	// runs before it, so a test that fails while the step is wedged does
	// not leave the worker's stop waiting on it until the test binary's
	// timeout (seen under load: 10 minutes).
	t.Cleanup(unwedge)
	cb := []dag.Callback{{Webhook: dag.Webhook{URL: hook.URL, Secret: "secret://env/ORRERY_TEST_HOOK_SECRET"}}}
	for _, r := range []dag.Resource{
		{Metadata: dag.Metadata{Name: "flaky", Namespace: "ops"}, Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: "allow",
			Run: &dag.Executor{Handler: "flaky"}, Alerts: &dag.Alerts{}, Callbacks: cb}},
		{Metadata: dag.Metadata{Name: "wedged", Namespace: "ops"}, Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")},
			Defaults: dag.StepDefaults{Timeout: dag.D(time.Second)},
			Run:      &dag.Executor{Handler: "wedged"}, Alerts: &dag.Alerts{FinishWithin: dag.D(2 * time.Second)}}},
	} {
		if _, err := jobs.Create(ctx, job.Anonymous, r, ""); err != nil {
			t.Fatal(err)
		}
	}
	dog := newDog(t, pool, manager(t, pool))
	pass := func() watchdog.Result {
		t.Helper()
		res, err := dog.Pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	failed, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "ops", Name: "flaky"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "ops", Name: "wedged"}, "", true); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 10*time.Second, "the flaky run dead-lettered", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE id = $1 AND status = 'failed'", failed.ID) == 1
	})
	var raised []store.Alert
	enginetest.WaitFor(t, 15*time.Second, "failure, dead_letter and both stuck alerts", func() bool {
		raised = append(raised, pass().Raised...)
		return len(raised) >= 4
	})
	kinds := map[string]int{}
	for _, a := range raised {
		kinds[a.Kind]++
		t.Logf("raised %s: %s", a.Kind, a.Message)
	}
	if kinds["failure"] != 1 || kinds["dead_letter"] != 1 || kinds["stuck"] != 2 || len(raised) != 4 {
		t.Fatalf("raised %v", kinds)
	}

	// The callback: retried after a 503, signed, with the run.
	enginetest.WaitFor(t, 15*time.Second, "the callback delivered", func() bool { return len(hook.events()) == 1 })
	got := hook.got[0]
	if got.header.Get("Orrery-Event") != "run.failed" || got.body["run"].(map[string]any)["status"] != "failed" || got.body["run"].(map[string]any)["id"] != failed.ID.String() {
		t.Fatalf("callback %v %v", got.header, got.body)
	}
	if err := notify.Verify([]byte("s3cret"), got.header.Get("Orrery-Signature"), got.raw, time.Now(), time.Minute); err != nil {
		t.Fatalf("signature: %v", err)
	}
	if err := notify.Verify([]byte("other"), got.header.Get("Orrery-Signature"), got.raw, time.Now(), time.Minute); err == nil {
		t.Fatal("a wrong secret verified")
	}
	// The worker records the delivery after the sink's answer, which the
	// sink counted already.
	enginetest.WaitFor(t, 15*time.Second, "one notification recorded delivered on its second attempt", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM notifications WHERE status = 'delivered' AND attempts = 2 AND last_status_code = 200") == 1
	})

	// The wedged attempt ends: both stuck alerts resolve. A later success
	// resolves the failure, a replay of the dead letter the dead_letter.
	unwedge()
	mode.Store("fail", false)
	if _, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "ops", Name: "flaky"}, "", true); err != nil {
		t.Fatal(err)
	}
	var resolved []store.Alert
	enginetest.WaitFor(t, 15*time.Second, "stuck and failure resolved", func() bool {
		resolved = append(resolved, pass().Resolved...)
		return len(resolved) == 3
	})
	if n := alerts(t, pool, "resolved_at IS NULL AND kind = 'dead_letter'"); n != 1 {
		t.Fatalf("%d dead_letter alerts open before the replay, want 1", n)
	}
	if _, err := runs.ReplayDeadLetters(ctx, job.Anonymous, nil, job.Ref{Namespace: "ops", Name: "flaky"}, 10); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 15*time.Second, "dead_letter resolved", func() bool {
		resolved = append(resolved, pass().Resolved...)
		return len(resolved) == 4
	})
	for _, a := range resolved {
		t.Logf("resolved %s: %s", a.Kind, a.Resolution)
	}
	if n := alerts(t, pool, "resolved_at IS NULL"); n != 0 {
		t.Fatalf("%d alerts still open", n)
	}
	// A cause that comes back after its alert resolved (a replayed dead
	// letter that dead-lettered again) raises it again, to be notified;
	// raised again while open, it is left as it is.
	var dl store.Alert
	for _, a := range resolved {
		if a.Kind == "dead_letter" {
			dl = a
		}
	}
	raise := func() []store.Alert {
		t.Helper()
		rows, err := store.New(pool).RaiseAlerts(ctx, store.RaiseAlertsParams{Ids: []uuid.UUID{uuid.New()}, TenantIds: []uuid.UUID{dl.TenantID},
			JobIds: []uuid.UUID{dl.JobID}, Shards: []int32{dl.Shard}, Kinds: []string{dl.Kind}, Causes: []string{dl.Cause},
			RunIds: []uuid.UUID{*dl.RunID}, AttemptIds: []uuid.UUID{uuid.Nil}, ScheduledFors: []time.Time{*dl.ScheduledFor}, Messages: []string{"again"}})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	if again := raise(); len(again) != 1 || again[0].ID != dl.ID || again[0].ResolvedAt != nil || again[0].Message != "again" {
		t.Fatalf("the dead_letter raised again after it resolved: %+v", again)
	}
	if twice := raise(); len(twice) != 0 {
		t.Fatalf("raised again while open: %+v", twice)
	}
}

// A delivery claimed by a worker that died (the claim taken, nothing
// recorded) is delivered by another once the claim runs out; the dead
// one's late record changes nothing.
func TestClaimOfADeadWorkerLapses(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	hook := newSink(t)
	if _, err := pool.Exec(ctx, `INSERT INTO notifications (id, tenant_id, job_id, namespace, queue, event, url, body, status, next_attempt_at, created_at)
		VALUES (gen_random_uuid(), $1, gen_random_uuid(), 'ops', 'default', 'run.succeeded', $2, '{"event":"run.succeeded"}', 'pending', now(), now())`,
		job.DefaultTenant, hook.URL); err != nil {
		t.Fatal(err)
	}
	// The dead worker's claim: taken, never recorded.
	claimed, err := store.New(pool).ClaimNotifications(ctx, store.ClaimNotificationsParams{Queues: []string{"default"}, ClaimSeconds: 1, Batch: 10})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	d, err := notify.New(notify.Config{Pool: pool, Queues: []string{"default"}, ClaimFor: time.Second,
		Client: executor.NewHTTPClient(&executor.EgressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := d.Pass(ctx); err != nil || n != 0 {
		t.Fatalf("a claimed delivery was taken again at once: %d, %v", n, err)
	}
	enginetest.WaitFor(t, 10*time.Second, "delivered after the claim lapsed", func() bool {
		_, _ = d.Pass(ctx)
		return len(hook.events()) == 1
	})
	n, err := store.New(pool).RecordDelivery(ctx, store.RecordDeliveryParams{ID: claimed[0].ID, Attempts: claimed[0].Attempts, Status: "failed", LastError: "late"})
	if err != nil || n != 0 {
		t.Fatalf("the dead worker's late record wrote %d rows (%v)", n, err)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM notifications WHERE status = 'delivered' AND attempts = 2"); n != 1 {
		t.Fatal("not recorded as delivered on the second claim")
	}
}

// Alerts that stay open do not hide the ones behind them: with a batch of
// two and two older alerts whose cause has not cleared, a third whose
// cause has cleared is resolved in the first pass.
func TestResolveLooksPastAlertsThatStayOpen(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "watched"},
		Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}, Run: &dag.Executor{Handler: "h"},
			Alerts: &dag.Alerts{StartWithin: dag.D(time.Minute), On: []string{dag.AlertMissed}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	// Two missed instants in the future (no run started since: they stay
	// open), then a failure alert, which the job no longer raises.
	for i, a := range []struct{ kind, cause string }{{"missed", "a"}, {"missed", "b"}, {"failure", "c"}} {
		if _, err := pool.Exec(ctx, `INSERT INTO alerts (id, tenant_id, job_id, shard, kind, cause, scheduled_for, message, raised_at)
			VALUES ($1, $2, $3, $4, $5, $6, now() + interval '1 day', 'test', now())`,
			fmt.Sprintf("00000000-0000-7000-8000-00000000000%d", i+1), j.Tenant, j.ID, j.Shard, a.kind, a.cause); err != nil {
			t.Fatal(err)
		}
	}
	dog, err := watchdog.New(watchdog.Config{Pool: pool, Shards: manager(t, pool), Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	// A pass looks at a window of Batch open alerts: the first, the two
	// that stay open; the next, the one behind them.
	res, err := dog.Pass(ctx)
	if err != nil || len(res.Resolved) != 0 {
		t.Fatalf("first pass: resolved %+v, %v; want none of the first two", res.Resolved, err)
	}
	res, err = dog.Pass(ctx)
	if err != nil || len(res.Resolved) != 1 || res.Resolved[0].Cause != "c" || res.Resolved[0].Resolution != "the job no longer raises failure" {
		t.Fatalf("second pass: resolved %+v, %v; want the failure alert behind the two open ones", res.Resolved, err)
	}
	if n := alerts(t, pool, "resolved_at IS NULL"); n != 2 {
		t.Fatalf("%d open alerts, want the two missed ones", n)
	}
	// The next pass starts from the first again: a run started for the
	// first missed instant resolves it.
	if _, err := pool.Exec(ctx, `INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at, started_at)
		VALUES (gen_random_uuid(), $1, $2, 1, $3, now() + interval '2 days', 'manual', 'running', now(), now())`, j.Tenant, j.ID, j.Shard); err != nil {
		t.Fatal(err)
	}
	if res, err = dog.Pass(ctx); err != nil || len(res.Resolved) != 2 || res.Resolved[0].Resolution != "a run started" {
		t.Fatalf("third pass: resolved %+v, %v; want both missed alerts (a run started after their instants)", res.Resolved, err)
	}
}

// A receiver whose status line is not text (a NUL, a byte that is not
// UTF-8) gets its failures recorded like any other, and the delivery
// stops at MaxAttempts: before, the record failed in the database and
// the delivery was sent again every claim period, for good.
func TestDeliveryErrorThatIsNotTextIsRecorded(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte("HTTP/1.1 500 a\x00\xff\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}()
		}
	}()
	if _, err := pool.Exec(ctx, `INSERT INTO notifications (id, tenant_id, job_id, namespace, queue, event, url, body, status, next_attempt_at, created_at)
		VALUES (gen_random_uuid(), $1, gen_random_uuid(), 'ops', 'default', 'run.succeeded', $2, '{"event":"run.succeeded"}', 'pending', now(), now())`,
		job.DefaultTenant, "http://"+ln.Addr().String()+"/hook"); err != nil {
		t.Fatal(err)
	}
	d, err := notify.New(notify.Config{Pool: pool, Queues: []string{"default"}, ClaimFor: time.Second, MaxAttempts: 1,
		Client: executor.NewHTTPClient(&executor.EgressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	var status, lastError string
	if err := pool.QueryRow(ctx, "SELECT status, last_error FROM notifications").Scan(&status, &lastError); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || lastError != "HTTP 500 a\uFFFD\uFFFD" {
		t.Fatalf("status %s, last error %q; want failed, with the status line made text", status, lastError)
	}
}

// pause_after_failures: the job pauses when its latest N ended runs all
// failed (a success between them restarts the count), once however often
// its finishes are seen, audited with the system as the actor, with an
// alert of kind paused told to alerts.notify; a resume resolves the alert
// and restarts the count.
func TestPauseAfterFailures(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	runs := run.NewService(pool, jobs, d)
	hook := newSink(t)
	var fail atomic.Bool
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 2},
		AllowEgress: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Handlers: map[string]executor.HandlerFunc{"brittle": func(context.Context, executor.Call) error {
			if fail.Load() {
				return executor.Permanent(errors.New("boom"))
			}
			return nil
		}}})
	ref := job.Ref{Namespace: "ops", Name: "brittle"}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: ref.Name, Namespace: ref.Namespace}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: "allow", Run: &dag.Executor{Handler: "brittle"},
		PauseAfterFailures: 3, Alerts: &dag.Alerts{On: []string{dag.AlertMissed}, StartWithin: dag.D(time.Hour), Notify: []dag.Notify{{Webhook: &dag.Webhook{URL: hook.URL}}}},
	}}, ""); err != nil {
		t.Fatal(err)
	}
	dog := newDog(t, pool, manager(t, pool))
	paused := 0
	// runOnce triggers a run, waits for it to end, and lets the watchdog
	// see its finish (twice: the second pass sees nothing new).
	runOnce := func(failing bool) {
		t.Helper()
		fail.Store(failing)
		r, err := runs.Trigger(ctx, job.Anonymous, ref, "", true)
		if err != nil {
			t.Fatal(err)
		}
		enginetest.WaitFor(t, 15*time.Second, "the run ended", func() bool {
			return enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE id = $1 AND status IN ('succeeded', 'failed', 'dead_lettered')", r.ID) == 1
		})
		for range 2 {
			res, err := dog.Pass(ctx)
			if err != nil {
				t.Fatal(err)
			}
			paused += res.Paused
		}
	}
	status := func() string {
		j, err := jobs.Get(ctx, job.Anonymous, ref)
		if err != nil {
			t.Fatal(err)
		}
		return j.Status
	}
	for _, failing := range []bool{true, true, false, true, true} {
		runOnce(failing)
	}
	if status() != job.StatusActive || paused != 0 {
		t.Fatalf("after F F S F F: status %s, %d pauses; want active: a success restarts the count", status(), paused)
	}
	runOnce(true)
	if status() != job.StatusPaused || paused != 1 {
		t.Fatalf("after three failures in a row: status %s, %d pauses; want paused once", status(), paused)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'pause' AND actor = $1", watchdog.PauseActor); n != 1 {
		t.Fatalf("%d pause audit rows by %q, want 1", n, watchdog.PauseActor)
	}
	if n := alerts(t, pool, "kind = 'paused' AND resolved_at IS NULL"); n != 1 {
		t.Fatalf("%d open paused alerts, want 1", n)
	}
	enginetest.WaitFor(t, 15*time.Second, "the paused alert told to alerts.notify", func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		for _, r := range hook.got {
			if a, ok := r.body["alert"].(map[string]any); ok && a["kind"] == dag.AlertPaused && r.header.Get("Orrery-Event") == "alert.raised" {
				return true
			}
		}
		return false
	})

	// Resumed: the alert resolves, and one more failure does not pause
	// (the count starts again at the resume).
	if _, err := jobs.Resume(ctx, job.Anonymous, ref); err != nil {
		t.Fatal(err)
	}
	runOnce(true)
	if status() != job.StatusActive || paused != 1 {
		t.Fatalf("one failure after the resume: status %s, %d pauses; want active", status(), paused)
	}
	if n := alerts(t, pool, "kind = 'paused' AND resolution = 'the job was resumed'"); n != 1 {
		t.Fatalf("%d paused alerts resolved by the resume, want 1", n)
	}
}
