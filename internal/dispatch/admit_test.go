package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is a database with tenants, their jobs and a run service.
type fixture struct {
	t      *testing.T
	pool   *pgxpool.Pool
	jobs   *job.Service
	runs   *run.Service
	access *access.Service
	live   *liveCount
	// queueDB holds the River tables when outbox moved them there.
	queueDB *pgxpool.Pool
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	pool := pgtest.Pool(t)
	jobs, err := job.New(context.Background(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	return &fixture{t: t, pool: pool, jobs: jobs, runs: run.NewService(pool, jobs, d), access: access.New(pool), live: newLiveCount()}
}

var admin = access.Principal{Name: "test", TenantName: "default", SystemAdmin: true}

// tenant makes a tenant with a weight and a quota (0: none).
func (f *fixture) tenant(name string, weight, maxConcurrency int32) job.Actor {
	f.t.Helper()
	ctx := context.Background()
	tn, err := f.access.CreateTenant(ctx, admin, name)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.access.SetQuota(ctx, admin, name, access.QuotaChange{Weight: &weight, MaxConcurrency: &maxConcurrency}); err != nil {
		f.t.Fatal(err)
	}
	return job.Actor{Tenant: tn.ID, Name: name}
}

// fire creates a job of n parallel steps in queue (priority per step from
// prio, default normal) and triggers one run of it.
func (f *fixture) fire(a job.Actor, name, queue string, n int, prio func(i int) string) uuid.UUID {
	f.t.Helper()
	spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow,
		Defaults: dag.StepDefaults{Queue: queue, Retry: &dag.Retry{MaxAttempts: 1}}}
	for i := range n {
		st := dag.Step{Name: fmt.Sprintf("s%03d", i), Run: dag.Executor{Handler: "work"}}
		st.Payload, _ = json.Marshal(map[string]string{"tenant": a.Name})
		if prio != nil {
			st.Priority = prio(i)
		}
		spec.Steps = append(spec.Steps, st)
	}
	return f.trigger(a, name, spec)
}

// fireRuns creates a one-step job of the tenant in queue and triggers n
// runs of it.
func (f *fixture) fireRuns(a job.Actor, name, queue string, n int) []uuid.UUID {
	f.t.Helper()
	spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow,
		Defaults: dag.StepDefaults{Queue: queue, Retry: &dag.Retry{MaxAttempts: 1}}}
	payload, _ := json.Marshal(map[string]string{"tenant": a.Name})
	spec.Steps = []dag.Step{{Name: "s000", Run: dag.Executor{Handler: "work"}, Payload: payload}}
	ids := []uuid.UUID{f.trigger(a, name, spec)}
	for len(ids) < n {
		r, err := f.runs.Trigger(context.Background(), a, job.Ref{Name: name}, "", true)
		if err != nil {
			f.t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

// trigger creates a job of spec and triggers one run of it.
func (f *fixture) trigger(a job.Actor, name string, spec dag.JobSpec) uuid.UUID {
	f.t.Helper()
	ctx := context.Background()
	if _, err := f.jobs.Create(ctx, a, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: spec}, ""); err != nil {
		f.t.Fatal(err)
	}
	r, err := f.runs.Trigger(ctx, a, job.Ref{Name: name}, "", false)
	if err != nil {
		f.t.Fatal(err)
	}
	return r.ID
}

// outbox moves the fixture's River tables to a queue database of their
// own, returned: its runs go through the outbox, relayed until the test
// ends.
func (f *fixture) outbox() *pgxpool.Pool {
	f.t.Helper()
	queue := pgtest.Pool(f.t)
	ctx, cancel := context.WithCancel(context.Background())
	d, err := dispatch.NewOutbox(dispatch.QueueDBs{Default: queue})
	if err != nil {
		f.t.Fatal(err)
	}
	relayed := make(chan error, 1)
	go func() { relayed <- d.Relay(ctx, f.pool, 20*time.Millisecond, slog.New(slog.DiscardHandler)) }()
	f.t.Cleanup(func() { cancel(); <-relayed })
	f.runs = run.NewService(f.pool, f.jobs, d)
	f.queueDB = queue
	return queue
}

func (f *fixture) waitRuns(within time.Duration, ids ...uuid.UUID) {
	f.t.Helper()
	for _, id := range ids {
		deadline := time.Now().Add(within)
		for enginetest.Int(f.t, f.pool, "SELECT count(*) FROM runs WHERE id = $1 AND status = 'succeeded'", id) != 1 {
			if time.Now().After(deadline) {
				f.t.Fatalf("not within %s: run %s succeeds; where its tasks are:\n%s", within, id, f.whereTasksAre(id))
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
}

// whereTasksAre describes a run's tasks and their River jobs, for a
// failure message: where a task that never ran is stuck.
func (f *fixture) whereTasksAre(run uuid.UUID) string {
	ctx := context.Background()
	var b strings.Builder
	rows, err := f.pool.Query(ctx, `SELECT t.step, t.status, t.queue, t.released_at IS NOT NULL, t.admitted_at IS NOT NULL,
		(SELECT count(*) FROM every_attempt AS a WHERE a.task_id = t.id), t.id::text FROM tasks t WHERE t.run_id = $1 ORDER BY t.created_at, t.step`, run)
	if err != nil {
		return err.Error()
	}
	var ids []string
	for rows.Next() {
		var step, status, queue, id string
		var released, admitted bool
		var attempts int
		if err := rows.Scan(&step, &status, &queue, &released, &admitted, &attempts, &id); err != nil {
			return err.Error()
		}
		ids = append(ids, id)
		fmt.Fprintf(&b, "  task %s %s: %s in %s, released %t, admitted %t, %d attempts\n", id, step, status, queue, released, admitted, attempts)
	}
	rows.Close()
	for _, pool := range []*pgxpool.Pool{f.pool, f.queueDB} {
		if pool == nil {
			continue
		}
		jobs, err := pool.Query(ctx, `SELECT args->>'task_id', state::text, queue, attempt, COALESCE(attempted_by::text, ''),
			to_char(scheduled_at, 'HH24:MI:SS.MS'), to_char(now(), 'HH24:MI:SS.MS') FROM river_job WHERE args->>'task_id' = ANY($1) ORDER BY id`, ids)
		if err != nil {
			fmt.Fprintf(&b, "  river: %v\n", err)
			continue
		}
		for jobs.Next() {
			var task, state, queue, by, at, now string
			var attempt int
			if err := jobs.Scan(&task, &state, &queue, &attempt, &by, &at, &now); err != nil {
				return err.Error()
			}
			fmt.Fprintf(&b, "  river job of %s: %s in %s, attempt %d by %q, scheduled %s (now %s)\n", task, state, queue, attempt, by, at, now)
		}
		jobs.Close()
	}
	if f.queueDB != nil {
		fmt.Fprintf(&b, "  outbox rows: %d\n", enginetest.Int(f.t, f.pool, "SELECT count(*) FROM dispatch_outbox"))
	}
	return b.String()
}

// maxOverlap is the most attempts of a tenant that ran at once, from the
// attempts recorded, ended and running (an oracle independent of
// admission's own counts).
func (f *fixture) maxOverlap(tenant uuid.UUID) int {
	f.t.Helper()
	return enginetest.Int(f.t, f.pool, `SELECT COALESCE(max(n), 0)::int FROM (
		SELECT (SELECT count(*) FROM every_attempt AS b WHERE b.tenant_id = a.tenant_id
		        AND b.started_at <= a.started_at AND (b.finished_at IS NULL OR b.finished_at > a.started_at)) AS n
		FROM every_attempt AS a WHERE a.tenant_id = $1) AS o`, tenant)
}

// liveCount tracks, per tenant, the attempts running in the handler now
// and the most at once; gate, when set, holds every attempt until closed.
type liveCount struct {
	mu   sync.Mutex
	now  map[string]int
	peak map[string]int
	gate chan struct{}
	hold time.Duration
}

func newLiveCount() *liveCount { return &liveCount{now: map[string]int{}, peak: map[string]int{}} }

func (l *liveCount) handler(ctx context.Context, c executor.Call) error {
	var p struct{ Tenant string }
	_ = json.Unmarshal(c.Payload, &p)
	l.mu.Lock()
	l.now[p.Tenant]++
	l.peak[p.Tenant] = max(l.peak[p.Tenant], l.now[p.Tenant])
	gate, hold := l.gate, l.hold
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.now[p.Tenant]--
		l.mu.Unlock()
	}()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-time.After(hold):
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (l *liveCount) get(m map[string]int, tenant string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return m[tenant]
}

func (f *fixture) worker(queue string, slots int) {
	f.t.Helper()
	enginetest.StartWorkers(f.t, worker.Config{StatePool: f.pool, Queues: map[string]int{queue: slots},
		Handlers: map[string]executor.HandlerFunc{"work": f.live.handler}})
}

// A tenant's quota holds across two worker processes' admitters: never more
// of its attempts at once than the quota, by the handler's count and by the
// attempts table, while another tenant without one fills the rest.
func TestQuotaHoldsAcrossWorkers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.live.hold = 50 * time.Millisecond
	capped := f.tenant("capped", 1, 3)
	free := f.tenant("free", 1, 0)
	f.worker("q", 4)
	f.worker("q", 4)
	ids := []uuid.UUID{f.fire(capped, "many", "q", 30, nil), f.fire(free, "many", "q", 30, nil)}
	f.waitRuns(60*time.Second, ids...)
	if p := f.live.get(f.live.peak, "capped"); p > 3 {
		t.Fatalf("capped tenant ran %d attempts at once, quota 3", p)
	}
	if o := f.maxOverlap(capped.Tenant); o > 3 || o < 1 {
		t.Fatalf("attempts table: capped tenant ran %d at once, quota 3", o)
	}
	// Slots are held from an attempt's start to its report, which on a
	// loaded machine take longer than the 50 ms its handler runs: the
	// attempts table, not the handler's count, says how many slots the
	// tenant held at once.
	if o := f.maxOverlap(free.Tenant); o < 5 {
		t.Fatalf("attempts table: the tenant without a quota ran at most %d at once of 8 slots: capacity was wasted", o)
	}
}

// A lone tenant uses every slot of the queue.
func TestLoneTenantUsesTheWholeQueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.live.gate = make(chan struct{})
	lone := f.tenant("lone", 1, 0)
	f.worker("q", 6)
	id := f.fire(lone, "wide", "q", 20, nil)
	enginetest.WaitFor(t, 20*time.Second, "6 attempts run at once", func() bool { return f.live.get(f.live.now, "lone") == 6 })
	// River holds one more job per slot: 12 admitted, 8 waiting.
	enginetest.WaitFor(t, 10*time.Second, "12 tasks admitted", func() bool {
		return enginetest.Int(t, f.pool, "SELECT count(*) FROM tasks WHERE run_id = $1 AND admitted_at IS NOT NULL", id) == 12
	})
	close(f.live.gate)
	f.waitRuns(30*time.Second, id)
}

// Weights: two backlogged tenants with weights 1 and 3 share a queue's
// starts about 1:3. Each tenant's backlog is 200 runs of one step, not
// one run of 200: the reports of one run's tasks finish one at a time
// under the run's lock, so the heavy tenant's three slots turned over
// slower than the light one's and the light tenant got 0.27 to 0.31 of
// the starts (0.256 to 0.281 so).
func TestWeightsHonoured(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.live.hold = 20 * time.Millisecond
	light := f.tenant("light", 1, 0)
	heavy := f.tenant("heavy", 3, 0)
	a, b := f.fireRuns(light, "backlog", "q", 200), f.fireRuns(heavy, "backlog", "q", 200)
	f.worker("q", 4)
	// The first 160 starts: both tenants backlogged throughout (each has 200).
	enginetest.WaitFor(t, 60*time.Second, "160 attempts started", func() bool {
		return enginetest.Int(t, f.pool, "SELECT count(*) FROM every_attempt AS a") >= 160
	})
	lightStarts := enginetest.Int(t, f.pool, `SELECT count(*) FROM (SELECT tenant_id FROM every_attempt AS a ORDER BY started_at, id LIMIT 160) AS s
		WHERE tenant_id = $1`, light.Tenant)
	share := float64(lightStarts) / 160
	t.Logf("light tenant (weight 1 of 4): %d of the first 160 starts (%.3f; its weight's share 0.25)", lightStarts, share)
	if share < 0.20 || share > 0.30 {
		t.Fatalf("light tenant's share of starts %.3f, want 0.25 ± 0.05", share)
	}
	f.waitRuns(60*time.Second, append(a, b...)...)
}

// Aging: a low-priority task that waited longer than the bound goes before
// fresh critical ones; under the bound, priority decides.
func TestAgedLowGoesFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	a := f.tenant("aging", 1, 0)
	prio := func(i int) string {
		if i == 0 {
			return "low"
		}
		return "critical"
	}
	id := f.fire(a, "mixed", "nowhere", 4, prio)
	if _, err := f.pool.Exec(ctx, "UPDATE tasks SET ready_at = ready_at - interval '10 minutes' WHERE run_id = $1 AND step = 's000'", id); err != nil {
		t.Fatal(err)
	}
	// A worker's advertisement of one slot (no worker runs): two in flight.
	if _, err := f.pool.Exec(ctx, `INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at)
		VALUES ($1, 'ad', '{"nowhere": 1}', now(), now(), now() + interval '1 hour')`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	admitted := func() string {
		return strings.Join(strings.Fields(fmt.Sprint(stepsAdmitted(t, f.pool, id))), ",")
	}
	if _, err := f.pool.Exec(ctx, "INSERT INTO queues (name) VALUES ('nowhere')"); err != nil {
		t.Fatal(err)
	}
	// Bound 1 hour: the 10-minute wait is not aged; critical first.
	if res, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: f.pool, Aging: time.Hour}, "nowhere"); err != nil || res.Admitted != 2 {
		t.Fatalf("admitted %+v, %v; want 2", res, err)
	}
	if got := admitted(); got != "[s001,s002]" {
		t.Fatalf("admitted %s, want the two oldest critical [s001,s002]", got)
	}
	// Free the slots; bound 5 minutes: the low task is aged and goes first.
	if _, err := f.pool.Exec(ctx, "UPDATE tasks SET status = 'succeeded', admitted_at = NULL WHERE run_id = $1 AND admitted_at IS NOT NULL", id); err != nil {
		t.Fatal(err)
	}
	if res, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: f.pool, Aging: 5 * time.Minute}, "nowhere"); err != nil || res.Admitted != 2 {
		t.Fatalf("admitted %+v, %v; want 2", res, err)
	}
	if got := admitted(); got != "[s000,s003]" {
		t.Fatalf("admitted %s, want the aged low task and then the critical one [s000,s003]", got)
	}
}

func stepsAdmitted(t *testing.T, pool *pgxpool.Pool, run uuid.UUID) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT step FROM tasks WHERE run_id = $1 AND admitted_at IS NOT NULL ORDER BY step", run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		out = append(out, s)
	}
	return out
}

// A quota change applies at the admitters' next pass, without a restart;
// a waiting task says why it waits.
func TestQuotaChangeAppliesWithoutRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.live.gate = make(chan struct{})
	a := f.tenant("growing", 1, 1)
	f.worker("q", 8)
	id := f.fire(a, "gated", "q", 6, nil)
	enginetest.WaitFor(t, 20*time.Second, "one attempt runs", func() bool { return f.live.get(f.live.now, "growing") == 1 })
	d, err := f.runs.Get(ctx, a, id, run.ItemsPage{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, tk := range d.Tasks {
		reasons[tk.WaitReason]++
	}
	if reasons["tenant quota 1/1"] != 5 {
		t.Fatalf("wait reasons %v, want 5 × \"tenant quota 1/1\"", reasons)
	}
	three := int32(3)
	if _, err := f.access.SetQuota(ctx, admin, "growing", access.QuotaChange{MaxConcurrency: &three}); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 20*time.Second, "three attempts run", func() bool { return f.live.get(f.live.now, "growing") == 3 })
	close(f.live.gate)
	f.waitRuns(30*time.Second, id)
	if p := f.live.get(f.live.peak, "growing"); p != 3 {
		t.Fatalf("peak %d at once, want 3", p)
	}
	if n := enginetest.Int(t, f.pool, "SELECT count(*) FROM audit_log WHERE action = 'set_quota' AND target_name = 'growing'"); n != 2 {
		t.Fatalf("%d set_quota audit rows, want 2", n)
	}
}

// A task of a queue no worker serves waits and says so.
func TestWaitReasonNoWorker(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.tenant("lonely", 1, 0)
	id := f.fire(a, "orphan", "nobody", 1, nil)
	d, err := f.runs.Get(context.Background(), a, id, run.ItemsPage{})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Tasks[0].WaitReason; got != "no worker serves queue nobody" {
		t.Fatalf("wait reason %q", got)
	}
}

// A quota across queues holds while the admitters of two queues (in two
// worker processes) decide for the same tenant at once.
func TestQuotaHoldsAcrossQueues(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.live.hold = 50 * time.Millisecond
	a := f.tenant("spread", 1, 2)
	f.worker("q1", 4)
	f.worker("q2", 4)
	ids := []uuid.UUID{f.fire(a, "one", "q1", 12, nil), f.fire(a, "two", "q2", 12, nil)}
	f.waitRuns(60*time.Second, ids...)
	if p := f.live.get(f.live.peak, "spread"); p > 2 {
		t.Fatalf("%d attempts at once across two queues, quota 2", p)
	}
	if o := f.maxOverlap(a.Tenant); o > 2 {
		t.Fatalf("attempts table: %d at once across two queues, quota 2", o)
	}
}

// With River's tables in a database of their own, admission writes outbox
// rows in its transaction and the relay inserts the River jobs: the quota
// holds, and nothing of River's is in the state database.
func TestQuotaHoldsThroughTheOutbox(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	queue := f.outbox()
	f.live.hold = 50 * time.Millisecond
	a := f.tenant("outboxed", 1, 2)
	enginetest.StartWorkers(t, worker.Config{StatePool: f.pool, QueueDBs: dispatch.QueueDBs{Default: queue}, Queues: map[string]int{"q": 4},
		Handlers: map[string]executor.HandlerFunc{"work": f.live.handler}})
	id := f.fire(a, "through", "q", 10, nil)
	f.waitRuns(60*time.Second, id)
	if p := f.live.get(f.live.peak, "outboxed"); p > 2 {
		t.Fatalf("%d attempts at once, quota 2", p)
	}
	if n := enginetest.Int(t, f.pool, "SELECT count(*) FROM river_job"); n != 0 {
		t.Fatalf("%d River jobs in the state database", n)
	}
	if n := enginetest.Int(t, queue, "SELECT count(*) FROM river_job"); n < 10 {
		t.Fatalf("%d River jobs in the queue database, want at least 10", n)
	}
	// Each carries what its task asks for, as a direct insert's does: the
	// worker reads no size (none asks any here: the zero vector).
	if n := enginetest.Int(t, queue, "SELECT count(*) FROM river_job WHERE args ? 'need'"); n < 10 {
		t.Errorf("%d River jobs through the outbox carry their task's need, want every one", n)
	}
}

// One release transaction holding several tenants' runs (a firing pass)
// does not admit past the queue's bound at release: tenants that do not
// all fit are left to the admitters, which share the slots by weight.
func TestOneReleaseOfSeveralTenantsKeepsTheBound(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	var news []run.New
	for i := range 4 {
		a := f.tenant(fmt.Sprintf("t%d", i), 1, 0)
		spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow, Defaults: dag.StepDefaults{Queue: "q"}}
		for k := range 10 {
			spec.Steps = append(spec.Steps, dag.Step{Name: fmt.Sprintf("s%02d", k), Run: dag.Executor{Handler: "work"}})
		}
		if _, err := f.jobs.Create(ctx, a, dag.Resource{Metadata: dag.Metadata{Name: "j"}, Spec: spec}, ""); err != nil {
			t.Fatal(err)
		}
		j, err := f.jobs.Get(ctx, a, job.Ref{Name: "j"})
		if err != nil {
			t.Fatal(err)
		}
		news = append(news, run.New{Job: run.JobRef{ID: j.ID, Tenant: a.Tenant, Version: j.Version, Shard: j.Shard, Spec: &j.Spec},
			At: time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC), Trigger: "schedule", Status: lifecycle.RunPending})
	}
	// One worker slot advertised: the queue holds 2.
	if _, err := f.pool.Exec(ctx, `INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at)
		VALUES ($1, 'ad', '{"q": 1}', now(), now(), now() + interval '1 hour')`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	if err := store.InRawTx(ctx, f.pool, func(tx pgx.Tx) error {
		_, err := (&run.Applier{Dispatcher: d}).Insert(ctx, tx, news, nil, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := enginetest.Int(t, f.pool, "SELECT count(*) FROM tasks WHERE queue = 'q' AND admitted_at IS NOT NULL"); n != 0 {
		t.Fatalf("one release of 4 tenants x 10 tasks into a queue holding 2 admitted %d at release", n)
	}
	if n := enginetest.Int(t, f.pool, "SELECT count(*) FROM river_job"); n != 0 {
		t.Fatalf("%d River jobs", n)
	}
}

// Tasks no live worker could run (they ask for a GPU; the queue's worker
// has none) do not hide those behind them: the pass admits the younger
// tasks that fit, and the GPU ones wait saying what they lack.
func TestTasksNoWorkerCanRunDoNotHideOthers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	a := f.tenant("gpus", 1, 0)
	id := f.fire(a, "mixed", "gpuq", 6, func(int) string { return "normal" })
	if _, err := f.pool.Exec(ctx, "UPDATE tasks SET res_gpu = 1 WHERE run_id = $1 AND step < 's004'", id); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at, cap_cpu, cap_memory, cap_gpu)
		VALUES ($1, 'ad', '{"gpuq": 1}', now(), now(), now() + interval '1 hour', 2000, 1073741824, 0)`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, "INSERT INTO queues (name) VALUES ('gpuq')"); err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	if res, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: f.pool}, "gpuq"); err != nil || res.Admitted != 2 {
		t.Fatalf("admitted %+v, %v; want 2", res, err)
	}
	if got := fmt.Sprint(stepsAdmitted(t, f.pool, id)); got != "[s004 s005]" {
		t.Fatalf("admitted %s, want the two that fit [s004 s005]", got)
	}
	why, err := dispatch.WaitReason(ctx, store.New(f.pool), a.Tenant, "gpuq", resources.Vector{GPU: 1})
	if err != nil || why != "needs gpu 1; the largest worker of queue gpuq has 0" {
		t.Fatalf("wait reason %q, %v", why, err)
	}
	// A quota lowered below what one step asks for: the step says so.
	if _, err := f.pool.Exec(ctx, `UPDATE tenants SET max_resources = '{"cpu": 500}' WHERE id = $1`, a.Tenant); err != nil {
		t.Fatal(err)
	}
	why, err = dispatch.WaitReason(ctx, store.New(f.pool), a.Tenant, "gpuq", resources.Vector{CPU: 1000})
	if want := "needs cpu 1, more than the tenant's quota of 500m: it waits until the quota is raised (or the step asks less)"; err != nil || why != want {
		t.Fatalf("wait reason %q, %v; want %q", why, err, want)
	}
}

// A tenant whose waiting tasks cannot go now does not take the slots the
// others could use: one waits for room (it asks for more memory than the
// queue's tasks in flight leave; fresh, so it does not reserve), one for
// the end of a retry's backoff; the pass gives the free slot to the
// tenant whose task fits, though that tenant holds every other slot.
func TestATenantThatCannotGoNowLeavesItsSlotsToOthers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	busy, big, later := f.tenant("busy", 1, 0), f.tenant("big", 1, 0), f.tenant("later", 1, 0)
	runs := map[string]uuid.UUID{}
	for _, x := range []struct {
		a   job.Actor
		n   int
		mem int64
	}{{busy, 10, 512 << 20}, {big, 1, 1 << 30}, {later, 1, 0}} {
		runs[x.a.Name] = f.fire(x.a, x.a.Name, "wq", x.n, nil)
		if _, err := f.pool.Exec(ctx, "UPDATE tasks SET res_memory = $2 WHERE run_id = $1", runs[x.a.Name], x.mem); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.pool.Exec(ctx, "UPDATE tasks SET ready_at = now() + interval '1 hour', status = 'retrying' WHERE run_id = $1", runs["later"]); err != nil {
		t.Fatal(err)
	}
	// Two slots: four tasks and 2Gi in flight at most.
	if _, err := f.pool.Exec(ctx, `INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at, cap_cpu, cap_memory, cap_gpu)
		VALUES ($1, 'w', '{"wq": 2}', now(), now(), now() + interval '1 hour', 2000, 1073741824, 0)`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, "INSERT INTO queues (name) VALUES ('wq')"); err != nil {
		t.Fatal(err)
	}
	// busy's four fill the queue (big's 1Gi never fits beside three).
	if _, err := f.pool.Exec(ctx, `UPDATE tasks SET admitted_at = now() WHERE id IN (SELECT id FROM tasks WHERE run_id = $1 ORDER BY step LIMIT 4)`, runs["busy"]); err != nil {
		t.Fatal(err)
	}
	// One of busy's ends: a slot and 512Mi free.
	if _, err := f.pool.Exec(ctx, `UPDATE tasks SET admitted_at = NULL, status = 'succeeded' WHERE id = (SELECT id FROM tasks WHERE run_id = $1 ORDER BY step LIMIT 1)`, runs["busy"]); err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	if res, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: f.pool}, "wq"); err != nil || res.Admitted != 1 {
		t.Fatalf("admitted %+v, %v; want busy's next task", res, err)
	}
	if got := fmt.Sprint(stepsAdmitted(t, f.pool, runs["busy"])); got != "[s001 s002 s003 s004]" {
		t.Fatalf("busy's admitted %s, want [s001 s002 s003 s004]", got)
	}
}

// Many tenants holding nothing whose tasks no worker can run (they ask for
// a GPU; the queue's worker has none) come first by share and yield no
// candidate: the pass reads on, round after round, and admits the tenant
// whose tasks fit.
func TestTenantsWithNothingToRunDoNotEndThePass(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	var gpuRuns []uuid.UUID
	for i := range 40 {
		a := f.tenant(fmt.Sprintf("gpu%02d", i), 1, 0)
		gpuRuns = append(gpuRuns, f.fire(a, "render", "wq", 1, nil))
	}
	if _, err := f.pool.Exec(ctx, "UPDATE tasks SET res_gpu = 1 WHERE run_id = ANY($1)", gpuRuns); err != nil {
		t.Fatal(err)
	}
	busy := f.tenant("busy", 1, 0)
	id := f.fire(busy, "work", "wq", 10, nil)
	// One slot: two tasks in flight at most; busy holds one already.
	if _, err := f.pool.Exec(ctx, `INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at, cap_cpu, cap_memory, cap_gpu)
		VALUES ($1, 'w', '{"wq": 1}', now(), now(), now() + interval '1 hour', 2000, 1073741824, 0)`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, "INSERT INTO queues (name) VALUES ('wq')"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `UPDATE tasks SET admitted_at = now() WHERE id = (SELECT id FROM tasks WHERE run_id = $1 ORDER BY step LIMIT 1)`, id); err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	if res, err := d.AdmitOnce(ctx, dispatch.AdmitConfig{Pool: f.pool}, "wq"); err != nil || res.Admitted != 1 {
		t.Fatalf("admitted %+v, %v; want busy's next task", res, err)
	}
}
