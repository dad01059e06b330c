package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/event"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	orun "github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// proc is an orrery process started by a test.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

func (p *proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *proc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		t.Fatalf("%s: signal %v: %v", p.name, s, err)
	}
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, name, nil, args...)
}

// startProcEnv starts the binary with extra environment variables (such
// as ORRERY_FAILPOINTS).
func startProcEnv(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	return startCmd(t, name, cmd)
}

// startCmd starts cmd (any program), stopping it when t ends.
func startCmd(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s logs ---\n%s", p.name, p.Logs())
		}
	})
	return p
}

// chaosHookSecret signs the chaos test's deliveries to its event source.
const chaosHookSecret = "chaos-hook-secret"

func startNodeProc(t *testing.T, dsn, name string) *proc {
	return startProc(t, name, "serve", "--db", dsn, "--addr", "127.0.0.1:0", "--node-name", name, "--shard-ttl", "2s", "--log-level", "info")
}

func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(context.Background(), "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// queryInt reads one number, read again after a serialization failure
// (enginetest.Int: the test databases are serializable, and a read beside
// the processes' writes may be the one aborted).
func queryInt(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	return enginetest.Int(t, pool, sql, args...)
}

func poll(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	took, ok := pollFor(within, cond)
	if !ok {
		t.Fatalf("not within %s: %s", within, what)
	}
	return took
}

// pollFor is poll that reports a timeout instead of failing, so that the
// caller can say what was left.
func pollFor(within time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			return time.Since(start), false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start), true
}

func deref[T any](p *T) (v T) {
	if p != nil {
		v = *p
	}
	return v
}

// allShardsLive reports whether every shard is owned under a live lease by
// a live node other than the ones named.
func allShardsLive(t *testing.T, pool *pgxpool.Pool, except ...string) bool {
	return queryInt(t, pool, `SELECT count(*) FROM shards s JOIN nodes n ON n.id = s.owner_node
		WHERE s.lease_expires_at > now() AND n.lease_expires_at > now() AND NOT n.name = ANY($1)`, except) == 64
}

// chaosCapacity is what each worker of the chaos test declares: mixed
// sizes, every one past the largest tick (1.5 cores).
var chaosCapacity = map[string]string{"w1": "cpu=8,memory=4Gi", "w2": "cpu=4,memory=2Gi", "w3": "cpu=3,memory=2Gi", "w4": "cpu=12,memory=8Gi"}

// Several scheduler nodes fire 200 every-second jobs at an HTTP sink for
// about a minute, run by two worker processes, while a node joins, one
// node is killed with SIGKILL, one is paused with SIGSTOP past its lease,
// a worker is killed right after River handed it a job and another right
// after an attempt started (failpoints):
// every instant gets exactly one run, none is missed or stuck, no task
// succeeds twice, no attempt is cancelled while its lease was valid, and
// no run is ever written under a shard epoch older than one already used
// (fencing). It logs the redeliveries by cause and how long after the
// worker's death its tasks ran again; and no worker, of mixed capacities,
// ran at once attempts asking for more than it has.
func TestNodesFireEveryInstantOnceThroughJoinKillAndPause(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: a minute of real time")
	}
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// The nodes run at PostgreSQL's default isolation, READ COMMITTED, as a
	// PostgreSQL deployment would (the other tests run SERIALIZABLE).
	var dbName string
	if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ALTER DATABASE "+dbName+" SET default_transaction_isolation = 'read committed'"); err != nil {
		t.Fatal(err)
	}
	var deliveries atomic.Int64
	var keys sync.Map // Idempotency-Key (run/step/attempt) -> *atomic.Int64
	var twice atomic.Int64
	// Each call takes 50 ms, as a real webhook would, so a killed worker
	// has attempts running as well as fetched.
	var wrongPayloads atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deliveries.Add(1)
		n, _ := keys.LoadOrStore(r.Header.Get("Idempotency-Key"), new(atomic.Int64))
		if n.(*atomic.Int64).Add(1) == 2 {
			twice.Add(1) // one attempt executed twice
		}
		var call struct {
			ScheduledFor time.Time       `json:"scheduled_for"`
			Payload      json.RawMessage `json:"payload"`
		}
		_ = json.NewDecoder(r.Body).Decode(&call)
		took := 50 * time.Millisecond
		if r.URL.Path == "/slow" { // the keyed job's step: long enough that its runs overlap
			took = 3 * time.Second
		}
		select {
		case <-time.After(took):
		case <-r.Context().Done():
		}
		switch r.URL.Path {
		case "/fail": // the brittle job's step: fails for good
			w.WriteHeader(http.StatusBadRequest)
		case "/pipe/list": // what the pipelines' conditions read: from the run's instant
			_, _ = fmt.Fprintf(w, `{"n": %d, "changed": %v}`, pipeN(call.ScheduledFor), pipeChanged(call.ScheduledFor))
		case "/fan/list": // a fan-out's list: fanN(instant) items
			items := make([]int, fanN(call.ScheduledFor))
			for i := range items {
				items[i] = i
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
		case "/fan/item": // an item got its element and index
			var p struct{ I, Idx int }
			if json.Unmarshal(call.Payload, &p) != nil || p.I != p.Idx {
				wrongPayloads.Add(1)
			}
			_, _ = fmt.Fprintf(w, `{"sq": %d}`, p.I*p.I)
		case "/fan/sum": // the fan-in read every item's output, in order
			var p struct{ N, Last int }
			if n := fanN(call.ScheduledFor); json.Unmarshal(call.Payload, &p) != nil || p.N != n || p.Last != (n-1)*(n-1) {
				wrongPayloads.Add(1)
			}
			_, _ = w.Write([]byte("ok"))
		case "/call/prep": // what a caller passes to its child run: from the caller's instant
			_, _ = fmt.Fprintf(w, `{"n": %d}`, callN(call.ScheduledFor))
		case "/call/double": // the child run's step: fails for good when n is a multiple of 7
			var p struct{ N int }
			if json.Unmarshal(call.Payload, &p) != nil || p.N < 1 {
				wrongPayloads.Add(1)
			}
			if p.N%7 == 0 {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			_, _ = fmt.Fprintf(w, `{"d": %d}`, 2*p.N)
		case "/call/check": // the step after read the child's output
			var p struct{ N, D int }
			if json.Unmarshal(call.Payload, &p) != nil || p.N != callN(call.ScheduledFor) || p.D != 2*p.N {
				wrongPayloads.Add(1)
			}
			_, _ = w.Write([]byte("ok"))
		case "/pipe/count": // its payload was evaluated from the run's params and list's output
			if want := fmt.Sprintf(`{"n":%d,"region":"eu"}`, pipeN(call.ScheduledFor)); string(call.Payload) != want {
				wrongPayloads.Add(1)
			}
			_, _ = w.Write([]byte("ok"))
		default:
			_, _ = w.Write([]byte("ok"))
		}
	}))
	defer sink.Close()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		// Mixed sizes (docs/resources.md): a quarter of the ticks ask for
		// 1.5 cores, the rest 100m; each worker declares its capacity, and
		// none runs more than it at once (checked below).
		size := &dag.Resources{CPU: "100m", Memory: "32Mi"}
		if i%4 == 0 {
			size = &dag.Resources{CPU: "1500m", Memory: "256Mi"}
		}
		_, err := jobs.Create(ctx, job.Anonymous, dag.Resource{
			Metadata: dag.Metadata{Name: fmt.Sprintf("tick-%03d", i)},
			Spec: dag.JobSpec{
				Schedule: schedule.Spec{Cron: schedule.Crons("* * * * * *")},
				Overlap:  dag.OverlapAllow,
				Defaults: dag.StepDefaults{Resources: size},
				Run:      &dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL}},
			},
		}, "")
		if err != nil {
			t.Fatal(err)
		}
	}
	// A share of the load is pipelines that carry data (docs/workflows.md):
	// params, an output read by the steps below, conditions and trigger
	// rules; each run's end is checked below against a reference
	// evaluation of the same graph (pipelineWant).
	for i := range pipelines {
		docs, es := dag.Decode("pipe.yaml", []byte(fmt.Sprintf(pipelineYAML, i, i%2 == 1, sink.URL, sink.URL, sink.URL, sink.URL)))
		if len(es) > 0 {
			t.Fatal(es)
		}
		if _, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Schedules of two expressions less an excluded window, a backfill of
	// 60 past instants, and a job that pauses itself after 3 failures,
	// all through the same faults (docs/schedules.md).
	for i := range multis {
		if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: fmt.Sprintf("multi-%02d", i)},
			Spec: dag.JobSpec{Schedule: multiSchedule, Overlap: dag.OverlapAllow, Run: &dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL}}}}, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Fan-outs of 1 to 200 items (fanN of the instant), 20 at a time, and
	// a fan-in that reads all their outputs (docs/workflows.md); checked
	// below: each group has its items once each, all succeeded.
	for i := range fans {
		docs, es := dag.Decode("fan.yaml", []byte(fmt.Sprintf(fanYAML, i, sink.URL, sink.URL, sink.URL)))
		if len(es) > 0 {
			t.Fatal(es)
		}
		if _, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Steps that run another job: each caller's run starts one run of
	// callee, whose output (or failure, for n a multiple of 7) is the
	// step's (docs/workflows.md); checked below against the reference.
	for i, y := range append([]string{fmt.Sprintf(calleeYAML, sink.URL)}, callerYAMLs(sink.URL)...) {
		docs, es := dag.Decode(fmt.Sprintf("call-%d.yaml", i), []byte(y))
		if len(es) > 0 {
			t.Fatal(es)
		}
		if _, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Jobs started by another's end (schedule.after): each of multi-00's
	// runs that succeeds starts one run of each (docs/workflows.md).
	for i := range afters {
		if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: fmt.Sprintf("after-%d", i)},
			Spec: dag.JobSpec{Schedule: schedule.Spec{After: &schedule.After{Job: "multi-00"}}, Overlap: dag.OverlapAllow,
				Misfire: dag.MisfireBackfill, MaxBackfill: 1000, Payload: dag.Payload(`{"upstream": "${{ run.upstream.id }}"}`),
				Run: &dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL}}}}, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Events are published throughout, each twice (a provider's retry):
	// each starts exactly one run of on-event (docs/events.md).
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "on-event"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Event: &schedule.Event{Type: "chaos.tick", Filter: "${{ event.data.n >= 0 }}"}}, Overlap: dag.OverlapAllow,
		Misfire: dag.MisfireBackfill, MaxBackfill: 1000, Payload: dag.Payload(`{"event": "${{ run.event.id }}"}`),
		Run: &dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL}}}}, ""); err != nil {
		t.Fatal(err)
	}
	// The same events debounced (docs/flow-control.md, "Debounce"): three
	// keys, each event joining its key's run, which starts a second after
	// its last event or two after its first: through the kills and the
	// pause every event taken joins exactly one run, and each run succeeds.
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "debounced"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Event: &schedule.Event{Type: "chaos.tick"}}, Overlap: dag.OverlapAllow,
		Debounce: &dag.Debounce{Key: "k${{ event.data.n % 3 }}", Period: dag.Duration{Duration: time.Second}, MaxWait: dag.Duration{Duration: 2 * time.Second}},
		Run:      &dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL}}}}, ""); err != nil {
		t.Fatal(err)
	}
	// A parked step fires every 2 s and sleeps 2 s through the kills and
	// the pause (docs/parked-steps.md): each run wakes once and succeeds.
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "napper"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("*/2 * * * * *")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{
			{Name: "nap", Sleep: &dag.Sleep{For: 2 * time.Second}},
			{Name: "ping", Needs: []string{"nap"}, Run: dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL}}},
		}}}, ""); err != nil {
		t.Fatal(err)
	}
	// A waiting step fires every 2 s and waits for the next chaos.tick
	// published (docs/parked-steps.md): each wait ends once, by one event.
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "waiter"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("*/2 * * * * *")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{
			{Name: "tick", Wait: &dag.Wait{Event: "chaos.tick", Match: "${{ event.data.n >= 0 }}", Timeout: dag.D(time.Hour)}},
			{Name: "ping", Needs: []string{"tick"}, Run: dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL}}},
		}}}, ""); err != nil {
		t.Fatal(err)
	}
	// Concurrency keys through the kills and the pause
	// (docs/flow-control.md): a job due every 2 s whose runs take 3 s holds
	// at most 2 runs of its one key at once; the others wait queued.
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "keyed"}, Spec: dag.JobSpec{
		Schedule:    schedule.Spec{Cron: schedule.Crons("*/2 * * * * *")},
		Concurrency: []dag.ConcurrencyLimit{{Key: "all", Limit: 2}},
		Steps:       []dag.Step{{Name: "work", Run: dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL + "/slow"}}}},
	}}, ""); err != nil {
		t.Fatal(err)
	}
	// A step's key (docs/flow-control.md, "Step level"): the same, its
	// tasks held at release, not its runs.
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "step-keyed"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("*/2 * * * * *")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "work", Run: dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL + "/slow"}},
			Concurrency: []dag.ConcurrencyLimit{{Key: "slow-vendor", Limit: 2}}}},
	}}, ""); err != nil {
		t.Fatal(err)
	}
	// A step's rate limit (docs/flow-control.md, "Rate limits"): a run
	// every 2 s, its step 2 a 2 s (a bucket of 2, a token a second), so
	// the runs that fire late together after a kill or the pause line up;
	// every admission, through the kills and the pause, spends a token
	// once.
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "rated"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("*/2 * * * * *")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "work", Run: dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL}},
			RateLimit: &dag.RateLimit{Key: "chaos-vendor", Limit: 2, Per: dag.Duration{Duration: 2 * time.Second}}}},
	}}, ""); err != nil {
		t.Fatal(err)
	}
	// A step that asks for an approval fires every 2 s; the deciders
	// approve each over REST, on whichever node answers, through the
	// kills and the pause (docs/parked-steps.md, "approval"): each ends
	// once, by one decision.
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "approver"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("*/2 * * * * *")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{
			{Name: "ok", Approval: &dag.Approval{Timeout: dag.D(time.Hour), Message: "chaos ${{ run.scheduled_for }}"}},
			{Name: "ping", Needs: []string{"ok"}, Run: dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL}}},
		}}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "bf-hourly"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("0 * * * *")}, Run: &dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL}}}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "brittle"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("*/2 * * * * *")}, Overlap: dag.OverlapAllow, PauseAfterFailures: 3,
		Run: &dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL + "/fail"}}, Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}}}}, ""); err != nil {
		t.Fatal(err)
	}
	chaosWorker := func(name string, env []string, extra ...string) *proc {
		args := append([]string{"worker", "--db", dsn, "--queue", "default=50", "--name", name, "--capacity", chaosCapacity[name],
			"--lease-ttl", "2s", "--allow-egress", "127.0.0.1/32", "--log-level", "info"}, extra...)
		return startProcEnv(t, name, env, args...)
	}
	// Signed deliveries to an event source go to the nodes' APIs
	// throughout too (docs/events.md, "Signed webhooks"): each node
	// resolves the source's secret under its --secret-env grant.
	if _, err := access.New(pool).CreateSource(ctx, access.Principal{Tenant: job.DefaultTenant, TenantName: "default", Name: "chaos", Role: access.Admin},
		access.Source{Name: "chaos", Kind: "hmac", Secret: "secret://env/ORRERY_CHAOS_HOOK"}); err != nil {
		t.Fatal(err)
	}
	var hookAddrs []string
	hookNode := func(name string) *proc {
		addr := freeAddr(t)
		hookAddrs = append(hookAddrs, addr)
		return startProcEnv(t, name, []string{"ORRERY_CHAOS_HOOK=" + chaosHookSecret}, "serve", "--db", dsn, "--addr", addr, "--node-name", name,
			"--shard-ttl", "2s", "--log-level", "info", "--secret-env", "default/default=ORRERY_CHAOS_HOOK")
	}
	n1 := hookNode("node-1")
	n2 := hookNode("node-2")
	chaosWorker("w1", nil)
	// w2 dies right after River hands it its 500th job.
	w2 := chaosWorker("w2", []string{"ORRERY_FAILPOINTS=worker/fetched=kill@500"})
	poll(t, 20*time.Second, "two nodes own all shards", func() bool { return allShardsLive(t, pool, "none") })
	publishing, stopPublishing := context.WithCancel(ctx)
	defer stopPublishing()
	published := make(chan int, 1)
	go func() {
		n := 0
		defer func() { published <- n }()
		for publishing.Err() == nil {
			for range 2 {
				if _, err := event.Publish(ctx, pool, job.DefaultTenant, jobs.Shards(), event.Event{Type: "chaos.tick", ID: fmt.Sprintf("tick-%d", n),
					Data: []byte(fmt.Sprintf(`{"n": %d}`, n))}); err != nil {
					t.Error(err)
					return
				}
			}
			n++
			time.Sleep(100 * time.Millisecond)
		}
	}()
	// Deliveries as a provider sends them: each until a node accepts it,
	// from the next node on when one is dead or paused, and once more
	// after that (a redelivery).
	type hookTally struct{ accepted, tried int }
	delivered := make(chan hookTally, 1)
	hookAddrs = hookAddrs[:2:2] // node-3, started later, takes none: its address is not known here
	go func() {
		// n deliveries accepted; the next, when cut short by the end, may
		// still land (a node that answered too late).
		n, node := 0, 0
		defer func() { delivered <- hookTally{n, n + 1} }()
		client := &http.Client{Timeout: 2 * time.Second}
		deliver := func(body []byte) bool {
			for publishing.Err() == nil {
				node++
				k, v := event.Sign("hmac", []byte(chaosHookSecret), body, time.Now())
				req, _ := http.NewRequest(http.MethodPost, "http://"+hookAddrs[node%len(hookAddrs)]+"/api/v1/hooks/default:chaos", bytes.NewReader(body))
				req.Header.Set(k, v)
				res, err := client.Do(req)
				if err != nil {
					continue // a dead or paused node: the next
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				switch res.StatusCode {
				case http.StatusAccepted, http.StatusOK:
					return true
				case http.StatusServiceUnavailable:
					continue // a draining node
				}
				t.Errorf("a delivery to node %d: %d", node%len(hookAddrs), res.StatusCode)
				return false
			}
			return false
		}
		for publishing.Err() == nil {
			body := []byte(fmt.Sprintf(`{"type": "chaos.tick", "id": "hook-%d", "data": {"n": %d}}`, n, n))
			if !deliver(body) {
				return
			}
			n++ // taken: it counts even if its redelivery is cut short
			deliver(body)
			time.Sleep(150 * time.Millisecond)
		}
	}()
	// The deciders: each parked approval approved over REST, from the
	// next node on when one is dead or paused; an answer lost to a kill
	// is sent again (then 409: decided already, or the step ended).
	approverKey, _, code := run(t, "keys", "create", "--db", dsn, "--principal", "chaos-approver", "--role", "editor")
	if code != 0 {
		t.Fatal("keys create failed")
	}
	approved := make(chan int, 1)
	go func() {
		n, node := 0, 0
		defer func() { approved <- n }()
		client := &http.Client{Timeout: 2 * time.Second}
		for publishing.Err() == nil {
			rows, err := pool.Query(ctx, "SELECT run_id::text FROM parked_steps WHERE kind = 'approval' LIMIT 20")
			if err != nil {
				t.Error(err)
				return
			}
			var runs []string
			for rows.Next() {
				var id string
				_ = rows.Scan(&id)
				runs = append(runs, id)
			}
			rows.Close()
			for _, id := range runs {
				for publishing.Err() == nil {
					node++
					req, _ := http.NewRequest(http.MethodPost, "http://"+hookAddrs[node%len(hookAddrs)]+"/api/v1/runs/"+id+"/steps/ok:approve",
						strings.NewReader(`{"comment": "chaos"}`))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(approverKey))
					res, err := client.Do(req)
					if err != nil {
						continue // a dead or paused node: the next
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode == http.StatusOK {
						n++
					}
					if res.StatusCode == http.StatusOK || res.StatusCode == http.StatusConflict {
						break
					}
					if res.StatusCode != http.StatusServiceUnavailable {
						t.Errorf("an approval on node %d: %d", node%len(hookAddrs), res.StatusCode)
						return
					}
				}
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()
	time.Sleep(2 * time.Second)
	from := dbNow(t, pool)
	bfFrom := from.Truncate(time.Hour).Add(-300 * time.Hour)
	bf, err := orun.NewService(pool, jobs, nil).Backfill(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "bf-hourly"},
		orun.BackfillOptions{From: bfFrom, To: bfFrom.Add(59 * time.Hour), MaxConcurrent: 5})
	if err != nil {
		t.Fatal(err)
	}
	// And, once its first 10 instants ended (through the faults), redo
	// all over them: each runs again from the start.
	bfAllCh := make(chan uuid.UUID, 1)
	go func() {
		defer close(bfAllCh)
		if _, ok := pollFor(5*time.Minute, func() bool {
			var n int // not queryInt: no t.Fatal off the test's goroutine
			_ = pool.QueryRow(ctx, "SELECT count(*) FROM runs WHERE trigger = 'backfill' AND finished_at IS NOT NULL AND scheduled_for <= $1",
				bfFrom.Add(9*time.Hour)).Scan(&n)
			return n == 10
		}); !ok {
			return
		}
		b, err := orun.NewService(pool, jobs, nil).Backfill(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "bf-hourly"},
			orun.BackfillOptions{From: bfFrom, To: bfFrom.Add(9 * time.Hour), MaxConcurrent: 2, Redo: orun.RedoAll})
		if err == nil {
			bfAllCh <- b.ID
		}
	}()

	poll(t, 30*time.Second, "w2 is killed right after a fetch", w2.exited)
	killedAt := dbNow(t, pool)
	// w3 dies right after starting its 500th attempt: that one and the
	// others it runs wait for their leases.
	w3 := chaosWorker("w3", []string{"ORRERY_FAILPOINTS=worker/started=kill@500"})
	poll(t, 30*time.Second, "w3 is killed right after an attempt started", w3.exited)
	killed3At := dbNow(t, pool)
	// w4 is bound to the default tenant: from its binding on, the
	// tenant's new tasks go to queue default|default, which only w4
	// serves, through the node kills and the pause below.
	chaosWorker("w4", nil, "--tenant", "default")
	time.Sleep(15 * time.Second) // two nodes
	startNodeProc(t, dsn, "node-3")
	time.Sleep(20 * time.Second) // three nodes

	n1.signal(t, syscall.SIGKILL)
	moved := poll(t, 15*time.Second, "node-1's shards move to live nodes", func() bool { return allShardsLive(t, pool, "node-1") })
	t.Logf("after SIGKILL, all shards were live again within %s (shard TTL 2s)", moved.Round(100*time.Millisecond))
	// REST across API processes: ten triggers of bf-hourly, each under
	// its Idempotency-Key, answered by api-1, which is then SIGKILLed; the
	// ten again to api-2 answer the same ten runs (checked to succeed
	// below, with everything fired up to until). A key lives with its run
	// in the database, not in a process.
	restTrigger := func(addr, key string) (string, int) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/namespaces/default/jobs/bf-hourly/trigger", strings.NewReader(`{"ignoreOverlap": true}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out struct{ Run struct{ ID string } }
		_ = json.NewDecoder(res.Body).Decode(&out)
		return out.Run.ID, res.StatusCode
	}
	apiAddr, api1 := startServe(t, dsn)
	restRuns := map[string]string{}
	for i := range 10 {
		key := fmt.Sprintf("chaos-rest-%d", i)
		id, code := restTrigger(apiAddr, key)
		if code != http.StatusOK || id == "" {
			t.Fatalf("REST trigger %s: %d", key, code)
		}
		restRuns[key] = id
	}
	api1.signal(t, syscall.SIGKILL)
	apiAddr, _ = startServe(t, dsn)
	for key, id := range restRuns {
		if again, code := restTrigger(apiAddr, key); code != http.StatusOK || again != id {
			t.Fatalf("REST trigger %s again, on another API process: %d run %s, want run %s", key, code, again, id)
		}
	}
	// The process that took over reads a request's path as the first did:
	// a query naming another job than the path is refused and deletes
	// nothing (bf-hourly's runs succeed below), and a label filter lists
	// by label.
	del, _ := http.NewRequest(http.MethodDelete, "http://"+apiAddr+"/api/v1/namespaces/default/jobs/bf-hourly?ref.name=other", nil)
	if res, err := http.DefaultClient.Do(del); err != nil || res.StatusCode != http.StatusBadRequest {
		t.Fatalf("DELETE with the job named in the query too: %v %v, want 400", res, err)
	} else {
		res.Body.Close()
	}
	if res, err := http.Get("http://" + apiAddr + "/api/v1/jobs?label=chaos:none"); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("a job list by label: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	time.Sleep(5 * time.Second)

	n2.signal(t, syscall.SIGSTOP)
	poll(t, 15*time.Second, "node-2's shards move while it is stopped", func() bool { return allShardsLive(t, pool, "node-1", "node-2") })
	time.Sleep(time.Second)
	n2.signal(t, syscall.SIGCONT)
	poll(t, 15*time.Second, "node-2 notices it lost its shards", func() bool { return strings.Contains(n2.Logs(), "shard lost") })
	time.Sleep(8 * time.Second)
	until := dbNow(t, pool).Add(-3 * time.Second).Truncate(time.Second)
	stopPublishing()
	// The jobs whose runs wait for their keys stop firing with the faults:
	// fired on past the window, every 2 s while the drain below takes
	// minutes on a loaded machine, their backlog grew faster than two
	// slots a key drain it, and was still draining when checked (three of
	// three chaos runs in a -count=3 beside make dev).
	for _, name := range []string{"keyed", "step-keyed", "rated"} {
		if _, err := jobs.Pause(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	events, hooks := <-published, <-delivered
	from = from.Truncate(time.Second)
	want := int(until.Sub(from) / time.Second)

	short := queryInt(t, pool, `SELECT count(*) FROM (
		SELECT j.id FROM jobs j LEFT JOIN runs r ON r.job_id = j.id AND r.scheduled_for > $1 AND r.scheduled_for <= $2
		WHERE j.name LIKE 'tick-%' GROUP BY j.id HAVING count(r.id) <> $3) d`, from, until, want)
	if short != 0 {
		t.Fatalf("%d of 200 jobs do not have exactly %d runs between %s and %s", short, want, from, until)
	}
	// The faults are over and the ticks' instants counted: the ticks stop,
	// so that what fired up to until drains instead of queueing behind 200
	// new tasks a second in the tenant's bound queue (on a loaded machine
	// its one worker falls behind them, and the backlog grows without end).
	for i := range 200 {
		if _, err := jobs.Pause(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: fmt.Sprintf("tick-%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	wantPipe := 0
	for at := from.Add(time.Second); !at.After(until); at = at.Add(time.Second) {
		if at.Second()%2 == 0 {
			wantPipe++
		}
	}
	if short := queryInt(t, pool, `SELECT count(*) FROM (
		SELECT j.id FROM jobs j LEFT JOIN runs r ON r.job_id = j.id AND r.scheduled_for > $1 AND r.scheduled_for <= $2
		WHERE j.name LIKE 'pipe-%' GROUP BY j.id HAVING count(r.id) <> $3) d`, from, until, wantPipe); short != 0 {
		t.Fatalf("%d of %d pipelines do not have exactly %d runs between %s and %s", short, pipelines, wantPipe, from, until)
	}
	multi, err := schedule.Parse(multiSchedule)
	if err != nil {
		t.Fatal(err)
	}
	wantMulti, _ := multi.Between(from.Add(time.Second), until, 10_000)
	if short := queryInt(t, pool, `SELECT count(*) FROM (
		SELECT j.id FROM jobs j LEFT JOIN runs r ON r.job_id = j.id AND r.scheduled_for > $1 AND r.scheduled_for <= $2
		WHERE j.name LIKE 'multi-%' GROUP BY j.id HAVING count(r.id) <> $3) d`, from, until, len(wantMulti)); short != 0 {
		t.Fatalf("%d of %d jobs of two expressions do not have exactly the %d instants preview shows between %s and %s", short, multis, len(wantMulti), from, until)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id
		WHERE j.name LIKE 'multi-%' AND extract(second FROM r.scheduled_for)::int % 5 = 0`); n != 0 {
		t.Fatalf("%d runs at instants the exclusion removes", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id
		WHERE r.status NOT IN ('pending', 'running', 'succeeded') AND j.name <> 'brittle' AND j.name NOT LIKE 'call%'
		  AND NOT (j.name IN ('keyed', 'debounced') AND r.status = 'queued')`); n != 0 {
		var which string
		_ = pool.QueryRow(ctx, `SELECT string_agg(DISTINCT j.name || ' ' || r.status || ' (' || r.reason || ')', '; ') FROM runs r JOIN jobs j ON j.id = r.job_id
			WHERE r.status NOT IN ('pending', 'running', 'succeeded') AND j.name <> 'brittle' AND j.name NOT LIKE 'call%'`).Scan(&which)
		t.Fatalf("%d runs were skipped, cancelled or failed; every one should have run (the callers' and their children's ends are checked apart; the keyed job's wait queued): %.600s", n, which)
	}
	stale := queryInt(t, pool, `SELECT count(*) FROM runs a JOIN runs b
		ON a.shard = b.shard AND a.shard_epoch < b.shard_epoch AND a.created_at > b.created_at
		WHERE a.scheduled_for > $1 AND b.scheduled_for > $1`, from)
	if stale != 0 {
		t.Fatalf("%d runs were written under a stale shard epoch", stale)
	}
	// No stuck run: everything fired up to until finishes within a lease
	// TTL and a reaper interval of the last fault, with margin.
	// (The callers and their child runs end as checkCalls says: some fail.)
	const unfinished = `FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
		WHERE r.scheduled_for <= $1 AND j.name <> 'brittle' AND r.trigger <> 'backfill'
		  AND (r.status <> 'succeeded' AND j.name NOT LIKE 'call%' OR r.finished_at IS NULL)`
	// Drained, or stalled: on a loaded machine the nodes and workers catch
	// up slower than 30 s (seen beside other test binaries, hundreds of
	// pipeline runs still draining, each moving); a run that is stuck
	// stops the count from falling for 30 s.
	// Progress is a run ending, or a task of one (a fan-out's items end
	// one by one), or any task of a run fired up to until ending: the runs
	// checked wait for the bound queue's admission behind the tenant's
	// ticks fired before them, a finite backlog (tens of thousands of
	// tasks on a loaded machine, seen twice in a -count=3 beside make dev),
	// drained oldest first. Once it is drained, a run still stuck stops
	// every count for 30 s.
	const doneTasks = `SELECT count(*) FROM tasks AS k JOIN runs AS r ON r.id = k.run_id
		WHERE r.scheduled_for <= $1 AND k.status NOT IN ('waiting', 'queued', 'running', 'retrying', 'expanded')`
	left, open, done, lastFall := -1, -1, -1, time.Now()
	if _, ok := pollFor(10*time.Minute, func() bool {
		n := queryInt(t, pool, "SELECT count(*) "+unfinished, until)
		m := queryInt(t, pool, `SELECT count(*) FROM tasks WHERE status IN ('waiting', 'queued', 'running', 'retrying')
			AND run_id IN (SELECT r.id `+unfinished+`)`, until)
		d := queryInt(t, pool, doneTasks, until)
		if left < 0 || n < left || m < open || d > done {
			left, open, done, lastFall = n, m, d, time.Now()
		}
		return n == 0 || time.Since(lastFall) > 30*time.Second
	}); !ok || left > 0 {
		// Say which: by job family, trigger, status and the state of their tasks.
		rows, err := pool.Query(context.Background(), `SELECT split_part(j.name, '-', 1), r.trigger, r.status, count(*),
			min(r.scheduled_for)::text, max(r.scheduled_for)::text,
			(SELECT string_agg(DISTINCT t.status, ',') FROM tasks AS t WHERE t.run_id = ANY(array_agg(r.id))) `+unfinished+` GROUP BY 1, 2, 3`, until)
		var what []string
		if err == nil {
			for rows.Next() {
				var fam, trig, st, lo, hi string
				var n int
				var tasks *string
				if rows.Scan(&fam, &trig, &st, &n, &lo, &hi, &tasks) == nil {
					what = append(what, fmt.Sprintf("%s %s %s: %d (%s..%s) tasks %v", fam, trig, st, n, lo, hi, deref(tasks)))
				}
			}
			rows.Close()
		}
		// And the tasks that wait for a worker: their queue, admission, and River job.
		rows, err2 := pool.Query(context.Background(), `SELECT t.step, t.queue, t.attempt, t.admitted_at IS NOT NULL, COALESCE(t.ready_at::text, ''), now()::text,
			COALESCE((SELECT string_agg(k.state::text || ' q=' || k.queue || ' att=' || k.attempt || ' by=' || COALESCE(array_to_string(k.attempted_by, ','), ''), '; ')
			          FROM river_job AS k WHERE k.args->>'task_id' = t.id::text), 'no river job')
			FROM tasks AS t WHERE t.status IN ('queued', 'retrying') AND t.run_id IN (SELECT r.id `+unfinished+`) LIMIT 10`, until)
		if err2 == nil {
			for rows.Next() {
				var step, queue, ready, now, river string
				var attempt int
				var admitted bool
				if rows.Scan(&step, &queue, &attempt, &admitted, &ready, &now, &river) == nil {
					what = append(what, fmt.Sprintf("task %s queue %s attempt %d admitted %v ready_at %s (now %s): %s", step, queue, attempt, admitted, ready, now, river))
				}
			}
			rows.Close()
		}
		// The queues: what holds their slots, and the workers serving them.
		rows, err2 = pool.Query(context.Background(), `SELECT t.queue || ' ' || t.status || ' admitted=' || (t.admitted_at IS NOT NULL)::text || ': ' || count(*)::text
			|| ' (no live river job: ' || count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM river_job AS k WHERE k.args->>'task_id' = t.id::text
			    AND k.state IN ('available', 'running', 'retryable', 'scheduled')))::text || ')'
			FROM tasks AS t WHERE t.status IN ('queued', 'running', 'retrying') GROUP BY t.queue, t.status, t.admitted_at IS NOT NULL
			UNION ALL SELECT 'worker ' || name || ' ' || queues::text || ' live=' || (lease_expires_at > now())::text FROM workers`)
		if err2 == nil {
			for rows.Next() {
				var s string
				if rows.Scan(&s) == nil {
					what = append(what, s)
				}
			}
			rows.Close()
		}
		t.Fatalf("every run up to the end of the faults (%s) succeeds: %d left, none of them ending for 30 s: %v (%v)", until, left, what, err)
	}
	// The backfill's runs (5 at a time) share the bound queue with the
	// tenant's ticks and fan-outs: on a loaded machine they drain slowly.
	// Done, or stalled: no backfill run succeeding for 30 s.
	bfAll, ok := <-bfAllCh
	if !ok {
		t.Fatal("the first 10 instants of the backfill did not end within 5 minutes, or redo all over them was refused")
	}
	doneRuns, lastDone := -1, time.Now()
	if _, ok := pollFor(5*time.Minute, func() bool {
		n := queryInt(t, pool, "SELECT count(*) FROM runs WHERE trigger = 'backfill' AND status = 'succeeded'")
		if n > doneRuns {
			doneRuns, lastDone = n, time.Now()
		}
		return (n == 60 && queryInt(t, pool, "SELECT count(*) FROM backfills WHERE id = ANY($1) AND status = 'done'", []uuid.UUID{bf.ID, bfAll}) == 2) ||
			time.Since(lastDone) > 30*time.Second
	}); !ok || doneRuns != 60 || queryInt(t, pool, "SELECT count(*) FROM backfills WHERE id = ANY($1) AND status = 'done'", []uuid.UUID{bf.ID, bfAll}) != 2 {
		t.Fatalf("the backfills: %d of their 60 runs succeeded, none more for 30 s, or they are not done", doneRuns)
	}
	if n := queryInt(t, pool, "SELECT created FROM backfills WHERE id = $1", bf.ID); n != 60 {
		t.Fatalf("the backfill created %d runs, want 60", n)
	}
	if n := queryInt(t, pool, "SELECT retried FROM backfills WHERE id = $1 AND created = 0 AND existing = 0", bfAll); n != 10 {
		t.Fatalf("redo all ran %d of the 10 ended runs again, want 10, and created or left none", n)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'bf-hourly' AND r.trigger = 'manual' AND r.status = 'succeeded'"); n != 10 {
		t.Fatalf("%d runs of the ten REST triggers succeeded, want 10 (one per idempotency key)", n)
	}
	if n := queryInt(t, pool, "SELECT count(DISTINCT scheduled_for) FROM runs WHERE trigger = 'backfill'"); n != 60 {
		t.Fatalf("the backfill's runs hold %d instants, want 60, each once", n)
	}
	if queryInt(t, pool, "SELECT count(*) FROM jobs WHERE name = 'brittle' AND status = 'paused'") != 1 ||
		queryInt(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'pause' AND actor = 'system (pause_after_failures)'") != 1 ||
		queryInt(t, pool, "SELECT count(*) FROM alerts WHERE kind = 'paused'") != 1 {
		t.Fatal("the brittle job is not paused exactly once by pause_after_failures, with one paused alert")
	}
	if n := twice.Load(); n != 0 {
		t.Fatalf("%d attempts were delivered to the sink twice (same run/step/attempt)", n)
	}
	// Every run of multi-00 that succeeded a while ago started exactly one
	// run of each job after it, whatever the kills and the pause did
	// between its end and theirs.
	ended := dbNow(t, pool).Add(-2 * time.Second)
	poll(t, 30*time.Second, "each succeeded run of multi-00 has started its downstream runs", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM runs AS u JOIN jobs AS j ON j.id = u.job_id
			WHERE j.name = 'multi-00' AND u.status = 'succeeded' AND u.finished_at < $1
			  AND (SELECT count(*) FROM runs AS d WHERE d.trigger = 'upstream' AND d.upstream->>'id' = u.id::text) <> $2`, ended, afters) == 0
	})
	if n := queryInt(t, pool, `SELECT count(*) FROM (SELECT d.job_id, d.upstream->>'id' FROM runs AS d WHERE d.trigger = 'upstream'
		GROUP BY 1, 2 HAVING count(*) > 1) AS twice`); n != 0 {
		t.Fatalf("%d upstream runs started a downstream job more than once", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM runs AS d WHERE d.trigger = 'upstream' AND NOT EXISTS (
		SELECT 1 FROM runs AS u JOIN jobs AS j ON j.id = u.job_id WHERE u.id::text = d.upstream->>'id' AND j.name = 'multi-00' AND u.status = 'succeeded')`); n != 0 {
		t.Fatalf("%d downstream runs name no succeeded run of multi-00", n)
	}
	// Every event published through the kills and the pause started
	// exactly one run of on-event, which succeeded.
	// The waits still parked end by one last tick.
	if _, err := jobs.Pause(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "waiter"}); err != nil {
		t.Fatal(err)
	}
	if _, err := event.Publish(ctx, pool, job.DefaultTenant, jobs.Shards(), event.Event{Type: "chaos.tick", ID: "tick-last", Data: []byte(`{"n": 0}`)}); err != nil {
		t.Fatal(err)
	}
	events++
	poll(t, 60*time.Second, "every event matched", func() bool { return queryInt(t, pool, "SELECT count(*) FROM events WHERE pending") == 0 })
	poll(t, 60*time.Second, "every waiter run ended", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'waiter' AND r.finished_at IS NULL") == 0
	})
	waits := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'waiter'")
	if n := queryInt(t, pool, `SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'waiter' AND (r.status <> 'succeeded'
		OR (SELECT count(*) FROM every_attempt a JOIN tasks t ON t.id = a.task_id WHERE t.run_id = r.id AND t.step = 'tick' AND a.output LIKE '%"type":"chaos.tick"%') <> 1)`); n != 0 || waits < 10 {
		t.Fatalf("%d of %d waiter runs did not end with one attempt, a tick its output", n, waits)
	}
	t.Logf("%d runs with a waiting step each ended once by an event, through the kills and the pause", waits)
	if n := queryInt(t, pool, "SELECT count(*) FROM events WHERE source = ''"); n != events || events < 100 {
		t.Fatalf("%d events written of %d published (each twice)", n, events)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM events WHERE source = 'chaos'"); n < hooks.accepted || n > hooks.tried || hooks.accepted < 50 {
		t.Fatalf("%d events written of %d deliveries accepted (each twice), %d tried", n, hooks.accepted, hooks.tried)
	}
	t.Logf("%d events published and %d signed deliveries accepted through the kills and the pause, each twice: each started one run", events, hooks.accepted)
	events += hooks.accepted
	if n := queryInt(t, pool, `SELECT count(*) FROM events AS e WHERE (SELECT count(*) FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
		WHERE r.event_id = e.id AND j.name = 'on-event') <> 1`); n != 0 {
		t.Fatalf("%d of %d events started no run of on-event or more than one", n, events)
	}
	// The keyed job's runs, once all ended: never more than 2 attempts
	// of its key at once.
	poll(t, 90*time.Second, "every keyed run ended", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'keyed' AND r.finished_at IS NULL") == 0
	})
	if most := queryInt(t, pool, `WITH a AS (SELECT a.started_at AS s, a.finished_at AS f FROM attempts a JOIN tasks t ON t.id = a.task_id
		JOIN runs r ON r.id = t.run_id JOIN jobs j ON j.id = r.job_id WHERE j.name = 'keyed')
		SELECT COALESCE(max((SELECT count(*) FROM a AS b WHERE b.s <= a.s AND b.f > a.s)), 0)::int FROM a`); most > 2 {
		t.Fatalf("%d attempts of the keyed job's one key at once (limit 2)", most)
	}
	keyedRuns := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'keyed'")
	t.Logf("%d runs of a job with a concurrency key of limit 2: never more than 2 at once through the kills and the pause", keyedRuns)
	poll(t, 90*time.Second, "every step-keyed run ended", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'step-keyed' AND r.finished_at IS NULL") == 0
	})
	if most := queryInt(t, pool, `WITH a AS (SELECT a.started_at AS s, a.finished_at AS f FROM attempts a JOIN tasks t ON t.id = a.task_id
		JOIN runs r ON r.id = t.run_id JOIN jobs j ON j.id = r.job_id WHERE j.name = 'step-keyed')
		SELECT COALESCE(max((SELECT count(*) FROM a AS b WHERE b.s <= a.s AND b.f > a.s)), 0)::int FROM a`); most > 2 {
		t.Fatalf("%d attempts of the step key at once (limit 2)", most)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM tasks WHERE flow_wait IS NOT NULL AND status = 'waiting'"); n != 0 {
		t.Fatalf("%d tasks still held on a step key once every run ended", n)
	}
	stepKeyed := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'step-keyed' AND r.status = 'succeeded'")
	t.Logf("%d runs of a step with a key of limit 2 succeeded: never more than 2 of its tasks at once through the kills and the pause", stepKeyed)

	// The rated job's admissions (when each task spent its token: its
	// last admission's, a retry's earlier one not kept), once all its runs
	// ended: never more than its bucket allows, 2 and a token a second.
	poll(t, 120*time.Second, "every rated run ended", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'rated' AND r.finished_at IS NULL") == 0
	})
	if n := queryInt(t, pool, `WITH a AS (SELECT row_number() OVER (ORDER BY t.rate_at) AS i, t.rate_at AS at FROM tasks AS t
			WHERE t.rate_key = 'chaos-vendor' AND t.rate_at IS NOT NULL AND t.status = 'succeeded')
		SELECT count(*)::int FROM a JOIN a AS b ON b.i > a.i
		WHERE b.i - a.i + 1 > 2 + floor(extract(epoch FROM b.at - a.at + interval '1 ms') / 1)`); n != 0 {
		t.Fatalf("%d pairs of the rated step's admissions closer than its bucket allows (2, then a token a second)", n)
	}
	rated := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'rated' AND r.status = 'succeeded'")
	t.Logf("%d runs of a step with a rate limit of 2 a 2 s succeeded: no token spent twice through the kills and the pause", rated)

	// The debounced job's runs, once every event was taken and every run
	// ended: the triggers they took are the events taken, each once; each
	// run succeeded.
	poll(t, 120*time.Second, "every chaos.tick taken and every debounced run ended", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM events WHERE type = 'chaos.tick' AND pending") == 0 &&
			queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'debounced' AND r.finished_at IS NULL") == 0
	})
	taken := queryInt(t, pool, "SELECT count(*) FROM events WHERE type = 'chaos.tick' AND NOT pending AND last_error = ''")
	if joined := queryInt(t, pool, "SELECT coalesce(sum(r.debounce_count), 0)::int FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'debounced'"); joined != taken {
		t.Fatalf("the debounced runs took %d triggers; %d events were taken", joined, taken)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'debounced' AND r.status <> 'succeeded'"); n != 0 {
		t.Fatalf("%d debounced runs did not succeed", n)
	}
	debouncedRuns := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'debounced'")
	t.Logf("%d events taken made %d debounced runs: each event joined one, every run succeeded", taken, debouncedRuns)

	// The approvals still parked are approved in-process; each run of
	// approver then succeeded with one attempt of its approval, decided
	// once (one decision, one audit row).
	if _, err := jobs.Pause(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "approver"}); err != nil {
		t.Fatal(err)
	}
	approvals := <-approved
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	deciders := orun.NewService(pool, jobs, d)
	poll(t, 60*time.Second, "every approver run ended", func() bool {
		rows, err := pool.Query(ctx, "SELECT run_id FROM parked_steps WHERE kind = 'approval'")
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if _, err := deciders.Decide(ctx, job.Anonymous, orun.Decision{Run: id, Step: "ok", Approve: true}); err != nil && !errors.Is(err, orun.ErrNotAwaitingApproval) && !errors.Is(err, orun.ErrDecidedAlready) {
				t.Fatal(err)
			}
		}
		return queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'approver' AND r.finished_at IS NULL") == 0
	})
	asked := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'approver'")
	if n := queryInt(t, pool, `SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'approver' AND (r.status <> 'succeeded'
		OR (SELECT count(*) FROM every_attempt a JOIN tasks t ON t.id = a.task_id WHERE t.run_id = r.id AND t.step = 'ok' AND a.output LIKE '%"decision":"approved"%') <> 1
		OR (SELECT count(*) FROM step_decisions d JOIN tasks t ON t.id = d.task_id WHERE t.run_id = r.id) <> 1
		OR (SELECT count(*) FROM audit_log l WHERE l.target_id = r.id AND l.action = 'approve') <> 1)`); n != 0 || approvals < 10 {
		t.Fatalf("%d of %d approver runs did not end by one approval, decided and audited once (%d approved over REST)", n, asked, approvals)
	}
	t.Logf("%d runs with an approval step each ended once by one decision, %d of them approved over REST through the kills and the pause", asked, approvals)
	if _, err := jobs.Pause(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "napper"}); err != nil {
		t.Fatal(err)
	}
	poll(t, 60*time.Second, "every napper run ended", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'napper' AND r.finished_at IS NULL") == 0
	})
	naps := queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'napper'")
	if n := queryInt(t, pool, `SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'napper' AND (r.status <> 'succeeded'
		OR (SELECT count(*) FROM every_attempt a JOIN tasks t ON t.id = a.task_id WHERE t.run_id = r.id AND t.step = 'nap') <> 1)`); n != 0 || naps < 10 {
		t.Fatalf("%d of %d napper runs did not succeed with one attempt of their nap", n, naps)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM parked_steps"); n != 0 {
		t.Fatalf("%d parked rows left", n)
	}
	t.Logf("%d runs with a parked step slept through the kills and the pause, each woken once", naps)
	checkPipelines(t, pool, until)
	checkFans(t, pool, until)
	checkCalls(t, pool, until)
	capacities := map[string]resources.Vector{}
	for name, c := range chaosCapacity {
		v, err := resources.ParseList(c)
		if err != nil {
			t.Fatal(err)
		}
		capacities[name] = v
	}
	checkNoOvercommit(t, pool, capacities)
	if n := wrongPayloads.Load(); n != 0 {
		t.Fatalf("%d pipeline steps got a payload other than their expressions' values", n)
	}
	// The bound queue was served by its bound worker only, and took the
	// tenant's new tasks: none made in the last 10 s is in the shared queue.
	if n := queryInt(t, pool, "SELECT count(*) FROM attempts a JOIN tasks k ON k.id = a.task_id WHERE k.queue = 'default|default' AND a.worker <> 'w4' AND NOT k.job_step"); n != 0 {
		t.Fatalf("%d attempts of the bound queue ran on a worker not bound to the tenant", n)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM attempts a JOIN tasks k ON k.id = a.task_id WHERE k.queue = 'default|default'"); n == 0 {
		t.Fatal("no attempt ran in the bound queue default|default")
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM tasks WHERE queue = 'default' AND created_at > now() - interval '10 seconds'"); n != 0 {
		t.Fatalf("%d tasks made in the last 10 s are in the shared queue, long after the binding", n)
	}
	// What the storage quotas count is what was written, through every
	// kill and pause: a firing transaction counts its runs or nothing.
	// One statement, one snapshot: the nodes are still firing.
	var runsOff, tasksOff int
	if err := store.Retry(ctx, func() error {
		return pool.QueryRow(ctx, `SELECT (SELECT sum(runs) FROM tenant_run_usage) - (SELECT count(*) FROM runs),
			(SELECT sum(tasks) FROM tenant_run_usage) - (SELECT count(*) FROM tasks)`).Scan(&runsOff, &tasksOff)
	}); err != nil || runsOff != 0 || tasksOff != 0 {
		t.Fatalf("tenant_run_usage counts %d runs and %d tasks more than the database holds (%v)", runsOff, tasksOff, err)
	}
	// A run that redo all ran again succeeds once more for each rerun.
	if n := queryInt(t, pool, `SELECT count(*) FROM (SELECT a.task_id FROM attempts AS a JOIN tasks AS k ON k.id = a.task_id
		WHERE a.outcome = 'succeeded'
		GROUP BY a.task_id, k.run_id
		HAVING count(*) > 1 + (SELECT count(*) FROM audit_log AS l WHERE l.action = 'rerun' AND l.target_id = k.run_id)) d`); n != 0 {
		t.Fatalf("%d tasks succeeded twice in one run of theirs", n)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'rerun'"); n != 10 {
		t.Fatalf("%d rerun audit rows, want 10", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM attempts a JOIN tasks k ON k.id = a.task_id JOIN runs r ON r.id = k.run_id JOIN jobs j ON j.id = r.job_id
		WHERE a.outcome = 'failed' AND a.exit_reason <> 'lease_expired' AND j.name <> 'brittle' AND j.name NOT LIKE 'call%'`); n != 0 {
		t.Fatalf("%d attempts failed other than by a lapsed lease (an attempt cancelled while its lease was valid reports its cancellation and is accepted)", n)
	}
	tasks := queryInt(t, pool, "SELECT count(*) FROM tasks")
	expired := queryInt(t, pool, "SELECT count(*) FROM attempts WHERE exit_reason = 'lease_expired'")
	redelivered := queryInt(t, pool, "SELECT count(*) FROM river_job WHERE args ? 'redelivers'")
	// Other than a lapsed lease, or a rerun of redo all after a success.
	other := queryInt(t, pool, `SELECT count(*) FROM attempts a WHERE a.number > 1
		AND NOT EXISTS (SELECT 1 FROM attempts p WHERE p.task_id = a.task_id AND p.number = a.number - 1 AND p.exit_reason = 'lease_expired')
		AND NOT EXISTS (SELECT 1 FROM attempts p JOIN tasks k ON k.id = p.task_id JOIN audit_log l ON l.target_id = k.run_id AND l.action = 'rerun'
			WHERE p.task_id = a.task_id AND p.number = a.number - 1 AND p.outcome = 'succeeded')`)
	t.Logf("%d instants x 200 jobs, each fired exactly once; %d tasks, %d deliveries at the sink", want, tasks, deliveries.Load())
	t.Logf("redeliveries per 10,000 tasks: %.1f after a lapsed lease (%d), %.1f of fetched-but-unstarted tasks (%d), %d other",
		float64(expired)*1e4/float64(tasks), expired, float64(redelivered)*1e4/float64(tasks), redelivered, other)
	if other != 0 {
		t.Fatalf("%d attempts were retried for a cause other than a lapsed lease", other)
	}
	var leaseRetry, strandedRetry float64
	_ = pool.QueryRow(ctx, `SELECT COALESCE(max(EXTRACT(EPOCH FROM a2.started_at - $1::timestamptz)), 0) FROM attempts a1
		JOIN attempts a2 ON a2.task_id = a1.task_id AND a2.number = a1.number + 1
		WHERE a1.worker = 'w3' AND a1.exit_reason = 'lease_expired'`, killed3At).Scan(&leaseRetry)
	_ = pool.QueryRow(ctx, `SELECT COALESCE(max(EXTRACT(EPOCH FROM a.started_at - $1::timestamptz)), 0) FROM attempts a
		JOIN river_job j ON (j.args->>'task_id')::uuid = a.task_id AND (j.args->>'attempt')::int = a.number
		WHERE j.args ? 'redelivers'`, killedAt).Scan(&strandedRetry)
	t.Logf("after a worker was killed (lease TTL 2 s, reaper 1 s, times from when the test saw it exit): w3's running tasks started again within %.1f s, w2's fetched-but-unstarted ones within %.1f s",
		leaseRetry, strandedRetry)
	if expired == 0 {
		t.Fatal("w3 was killed with an attempt running, yet no lease expired")
	}
}

// A worker that dies mid-task (SIGKILL) or stalls (SIGSTOP) past its lease:
// the attempt is recorded as lease_expired, the task retries on another
// worker with a new fencing token, and the stalled worker's late report is
// rejected and kept on the old attempt.
func TestStalledWorkersLeaseLapsesAndLateReportIsRejected(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test")
	}
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	startNodeProc(t, dsn, "node")
	worker := func(name string) *proc {
		return startProc(t, name, "worker", "--db", dsn, "--queue", "default=2", "--name", name, "--lease-ttl", "2s", "--allow-command", "/bin/*", "--log-level", "info")
	}
	jobs, _ := job.New(ctx, pool, nil)
	create := func(name string) {
		_, err := jobs.Create(ctx, job.Anonymous, dag.Resource{
			Metadata: dag.Metadata{Name: name},
			Spec: dag.JobSpec{
				Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)},
				Run:      &dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/sh", "-c", `if [ "$ORRERY_ATTEMPT" = 1 ]; then sleep 3; fi`}}},
				Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 3, Initial: dag.D(100 * time.Millisecond), Max: dag.D(200 * time.Millisecond)}},
			},
		}, "")
		if err != nil {
			t.Fatal(err)
		}
	}
	attemptRunningOn := func(jobName, worker string) bool {
		return queryInt(t, pool, `SELECT count(*) FROM every_attempt a JOIN tasks t ON t.id = a.task_id JOIN runs r ON r.id = t.run_id
			JOIN jobs j ON j.id = r.job_id WHERE j.name = $1 AND a.worker = $2 AND a.outcome = 'running'`, jobName, worker) == 1
	}
	runSucceeded := func(jobName string) bool {
		return queryInt(t, pool, `SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = $1 AND r.status = 'succeeded'`, jobName) == 1
	}

	// SIGKILL: the worker never reports.
	w1 := worker("w1")
	create("killed")
	poll(t, 20*time.Second, "w1 runs attempt 1", func() bool { return attemptRunningOn("killed", "w1") })
	w2 := worker("w2")
	w1.signal(t, syscall.SIGKILL)
	killedAt := dbNow(t, pool)
	poll(t, 30*time.Second, "the task retries on w2 and succeeds", func() bool { return runSucceeded("killed") })
	var retryAfter float64
	if err := store.Retry(ctx, func() error {
		return pool.QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM a.started_at - $1::timestamptz) FROM attempts a
			JOIN tasks t ON t.id = a.task_id JOIN runs r ON r.id = t.run_id JOIN jobs j ON j.id = r.job_id
			WHERE j.name = 'killed' AND a.number = 2`, killedAt).Scan(&retryAfter)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("the killed worker's running task started again %.1f s after the kill (lease TTL 2 s, reaper interval 1 s)", retryAfter)

	// SIGSTOP: the worker reports after its lease lapsed.
	create("stalled")
	poll(t, 20*time.Second, "w2 runs attempt 1", func() bool { return attemptRunningOn("stalled", "w2") })
	w2.signal(t, syscall.SIGSTOP)
	worker("w3")
	poll(t, 30*time.Second, "the task retries on w3 and succeeds", func() bool { return runSucceeded("stalled") })
	time.Sleep(3 * time.Second) // the stalled attempt's sleep 3 has finished meanwhile
	w2.signal(t, syscall.SIGCONT)
	poll(t, 20*time.Second, "w2's late report is recorded", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM attempts WHERE worker = 'w2' AND late_outcome = 'succeeded'") == 1
	})

	for _, name := range []string{"killed", "stalled"} {
		var reason, second string
		err := store.Retry(ctx, func() error {
			return pool.QueryRow(ctx, `SELECT a1.exit_reason, a2.outcome FROM attempts a1
				JOIN attempts a2 ON a2.task_id = a1.task_id AND a2.number = 2
				JOIN tasks t ON t.id = a1.task_id JOIN runs r ON r.id = t.run_id JOIN jobs j ON j.id = r.job_id
				WHERE j.name = $1 AND a1.number = 1`, name).Scan(&reason, &second)
		})
		if err != nil {
			t.Fatal(err)
		}
		if reason != "lease_expired" || second != "succeeded" {
			t.Fatalf("%s: attempt 1 ended %q, attempt 2 %q; want lease_expired then succeeded", name, reason, second)
		}
	}
	// The refusal is recorded in the report's own transaction; w2 logs it
	// once that returns, a moment later.
	poll(t, 20*time.Second, "w2 logs its rejected report", func() bool { return strings.Contains(w2.Logs(), "stale report rejected") })
}

// fans is how many of the chaos test's jobs fan out; fanYAML is one (its
// index, the sink's URL three times), firing every tenth second.
const (
	fans    = 2
	fanYAML = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: fan-%d}
spec:
  schedule: {cron: "*/10 * * * * *"}
  overlap: allow
  steps:
    - name: list
      run: {http: {url: "%s/fan/list"}}
    - name: each
      needs: [list]
      for_each: ${{ steps.list.output.items }}
      max_parallel: 50
      payload: {i: "${{ item }}", idx: "${{ item_index }}"}
      run: {http: {url: "%s/fan/item"}}
    - name: sum
      needs: [each]
      payload: {n: "${{ size(steps.each.outputs) }}", last: "${{ steps.each.outputs[size(steps.each.outputs) - 1].sq }}"}
      run: {http: {url: "%s/fan/sum"}}
`
)

// fanN is how many items the fan-outs' list answers for instant at: 1 to
// 200.
func fanN(at time.Time) int { return 1 + int(at.Unix()/10*37%200) }

// checkFans checks every fan-out run up to until against the reference:
// succeeded, its group with fanN items, each index once, all succeeded,
// and the counters agreeing (no item lost or doubled).
func checkFans(t *testing.T, pool *pgxpool.Pool, until time.Time) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT r.scheduled_for, r.status, g.status, COALESCE(g.items_total, -1), COALESCE(g.items_succeeded, -1),
			(SELECT count(*) FROM tasks AS i WHERE i.group_id = g.id),
			(SELECT count(DISTINCT i.item_index) FROM tasks AS i WHERE i.group_id = g.id AND i.status = 'succeeded'),
			(SELECT COALESCE(max(i.item_index), -1) FROM tasks AS i WHERE i.group_id = g.id)
		FROM runs r JOIN jobs j ON j.id = r.job_id JOIN tasks g ON g.run_id = r.id AND g.step = 'each'
		WHERE j.name LIKE 'fan-%' AND r.scheduled_for <= $1`, until)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	checked, items := 0, 0
	for rows.Next() {
		var at time.Time
		var run, group string
		var total, succeeded, n, distinct, last int
		if err := rows.Scan(&at, &run, &group, &total, &succeeded, &n, &distinct, &last); err != nil {
			t.Fatal(err)
		}
		checked++
		items += n
		want := fanN(at)
		if run != "succeeded" || group != "succeeded" || total != want || succeeded != want || n != want || distinct != want || last != want-1 {
			t.Errorf("fan-out at %s: run %s, group %s, items_total %d, items_succeeded %d, %d items (%d distinct succeeded, last index %d); want %d",
				at.Format(time.RFC3339), run, group, total, succeeded, n, distinct, last, want)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no fan-out run to check")
	}
	t.Logf("%d fan-out runs (%d items) expanded and ended as the reference says", checked, items)
}

// calleeYAML is the job the chaos test's callers run as a step (the
// sink's URL); callerYAMLs are the callers, firing every fifth second.
const calleeYAML = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: callee}
spec:
  schedule: {cron: "0 0 1 1 *"}
  params:
    n: {type: integer}
  steps:
    - name: double
      payload: {n: "${{ params.n }}"}
      run: {http: {url: "%s/call/double"}}
`

func callerYAMLs(sink string) []string {
	var out []string
	for i := range callers {
		out = append(out, fmt.Sprintf(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: caller-%d}
spec:
  schedule: {cron: "*/5 * * * * *"}
  overlap: allow
  steps:
    - name: prep
      run: {http: {url: "%s/call/prep"}}
    - name: invoke
      needs: [prep]
      run: {job: {name: callee, params: {n: "${{ steps.prep.output.n }}"}}}
    - name: check
      needs: [invoke]
      payload: {n: "${{ steps.prep.output.n }}", d: "${{ steps.invoke.output.outputs.double.d }}"}
      run: {http: {url: "%s/call/check"}}
`, i, sink, sink))
	}
	return out
}

// callers is how many of the chaos test's jobs run callee as a step.
const callers = 2

// callN is what a caller at instant at passes to its child run: 1 to 50;
// a multiple of 7 fails the child, and so the caller.
func callN(at time.Time) int { return 1 + int(at.Unix()/5*13%50) }

// checkCalls checks every caller's run up to until against the reference:
// exactly one child run, of trigger parent, given callN of the instant,
// both succeeded, or both dead-lettered when it is a multiple of 7; and no
// child run that no caller's step started.
func checkCalls(t *testing.T, pool *pgxpool.Pool, until time.Time) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT r.scheduled_for, r.status,
			(SELECT count(*) FROM runs AS c JOIN tasks AS i ON i.id = c.parent_task_id WHERE i.run_id = r.id),
			COALESCE((SELECT c.status || ' ' || c.trigger || ' ' || (c.params->>'n') FROM runs AS c JOIN tasks AS i ON i.id = c.parent_task_id
			          WHERE i.run_id = r.id AND i.step = 'invoke' AND i.child_run_id = c.id), '')
		FROM runs r JOIN jobs j ON j.id = r.job_id
		WHERE j.name LIKE 'caller-%' AND r.scheduled_for <= $1`, until)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	checked, failed := 0, 0
	for rows.Next() {
		var at time.Time
		var status, child string
		var children int
		if err := rows.Scan(&at, &status, &children, &child); err != nil {
			t.Fatal(err)
		}
		checked++
		n, want := callN(at), "succeeded"
		if n%7 == 0 {
			want = "failed"
			failed++
		}
		if status != want || children != 1 || child != fmt.Sprintf("%s parent %d", want, n) {
			t.Errorf("caller at %s: run %s, %d child runs (%q); want %s and one child run %s given n=%d", at.Format(time.RFC3339), status, children, child, want, want, n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no caller's run to check")
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM runs AS c JOIN jobs AS j ON j.id = c.job_id WHERE j.name = 'callee'
		AND (c.trigger <> 'parent' OR NOT EXISTS (SELECT 1 FROM tasks AS i WHERE i.id = c.parent_task_id AND i.child_run_id = c.id))`); n != 0 {
		t.Errorf("%d runs of callee were started by no caller's step", n)
	}
	t.Logf("%d callers' runs (%d failing with their child) each started one child run and ended as the reference says", checked, failed)
}

// afters is how many of the chaos test's jobs start after multi-00.
const afters = 3

// multis is how many of the chaos test's jobs fire multiSchedule: every
// second divisible by 2 or 3, less those divisible by 5.
const multis = 10

var multiSchedule = schedule.Spec{Cron: schedule.Crons("*/2 * * * * *", "*/3 * * * * *"), Exclude: &schedule.Exclude{Cron: []string{"*/5 * * * * *"}}}

// pipelines is how many of the chaos test's jobs are pipelines that carry
// data; pipelineYAML is one (its index, dry_run's default, the sink's URL
// four times), firing every even second.
const (
	pipelines    = 20
	pipelineYAML = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: pipe-%03d}
spec:
  schedule: {cron: "*/2 * * * * *"}
  overlap: allow
  params:
    region:  {type: string, default: eu}
    dry_run: {type: boolean, default: %v}
  steps:
    - name: list
      run: {http: {url: "%s/pipe/list"}}
    - name: count
      needs: [list]
      when: "${{ steps.list.output.n > 0 }}"
      payload: {n: "${{ steps.list.output.n }}", region: "${{ params.region }}"}
      run: {http: {url: "%s/pipe/count"}}
    - name: publish
      needs: [count]
      trigger_rule: none_failed
      when: "${{ !params.dry_run && steps.list.output.changed }}"
      run: {http: {url: "%s/pipe/publish"}}
    - name: final
      needs: [publish]
      run: {http: {url: "%s/pipe/final"}}
`
)

// pipeN and pipeChanged are what the sink's list step answers for a run
// of a pipeline at instant at.
func pipeN(at time.Time) int        { return at.Second() / 2 % 3 }
func pipeChanged(at time.Time) bool { return at.Second()/2%2 == 0 }

// pipelineWant is the reference evaluation of a pipeline's run: each
// step's end, from the run's instant and the job's dry_run.
func pipelineWant(at time.Time, dryRun bool) map[string]string {
	want := map[string]string{"list": "succeeded", "count": "skipped", "publish": "skipped", "final": "skipped"}
	if pipeN(at) > 0 {
		want["count"] = "succeeded"
	}
	// none_failed: a skipped count counts as done.
	if !dryRun && pipeChanged(at) {
		want["publish"], want["final"] = "succeeded", "succeeded"
	}
	return want
}

// checkPipelines compares every pipeline run up to until, and each of its
// tasks, with the reference evaluation.
func checkPipelines(t *testing.T, pool *pgxpool.Pool, until time.Time) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT j.name, r.scheduled_for, r.status, (r.params->>'dry_run')::bool, t.step, t.status
		FROM runs r JOIN jobs j ON j.id = r.job_id JOIN tasks t ON t.run_id = r.id
		WHERE j.name LIKE 'pipe-%' AND r.scheduled_for <= $1`, until)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	checked, wrong := 0, 0
	for rows.Next() {
		var name, runStatus, step, status string
		var at time.Time
		var dryRun bool
		if err := rows.Scan(&name, &at, &runStatus, &dryRun, &step, &status); err != nil {
			t.Fatal(err)
		}
		checked++
		if want := pipelineWant(at, dryRun)[step]; want != status || runStatus != "succeeded" {
			if wrong++; wrong <= 5 {
				t.Errorf("%s at %s (dry_run %v): %s is %s, want %s (run %s)", name, at.Format(time.RFC3339), dryRun, step, status, want, runStatus)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if wrong > 0 || checked == 0 {
		t.Fatalf("%d of %d pipeline tasks ended other than the reference evaluation says", wrong, checked)
	}
	t.Logf("%d tasks of %d pipelines with params, outputs and conditions ended as the reference evaluation says", checked, pipelines)
}
