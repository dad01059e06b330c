package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

// serveRemote serves the API with a gateway and a scheduler node (its
// reaper expires remote leases), authentication off.
func serveRemote(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw := enginetest.StartGateway(t, pool)
	enginetest.StartNode(t, pool)
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.Listen("127.0.0.1:0", api.NewHandler(api.Services{Jobs: jobs, Runs: run.NewService(pool, jobs, d), State: pool,
		Auth: api.NoAuth{}, Gateway: gw}, nil))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + srv.Addr(), pool
}

// remoteJob is a job of one remote step of type echo.
func remoteJob(name string, payload map[string]any) *orreryv1.CreateJobRequest {
	p, _ := structpb.NewValue(payload)
	return &orreryv1.CreateJobRequest{
		Metadata: &orreryv1.JobMetadata{Name: name, Namespace: "billing"},
		Spec: &orreryv1.JobSpec{
			Schedule: &orreryv1.Schedule{At: "2099-01-01T00:00:00Z"},
			Run:      &orreryv1.Executor{Kind: &orreryv1.Executor_Worker{Worker: "echo"}},
			Payload:  p,
		},
	}
}

// A remote worker claims the attempt of a triggered run, renews its lease,
// reports it; the run succeeds with its output. A second report of the
// same attempt is refused, and a claim with nothing to do waits and
// answers none.
func TestRemoteWorkerRunsAStep(t *testing.T) {
	t.Parallel()
	base, pool := serveRemote(t)
	ctx := context.Background()
	jobs := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	runs := orreryv1connect.NewRunServiceClient(http.DefaultClient, base)
	workers := orreryv1connect.NewWorkerServiceClient(http.DefaultClient, base)
	if _, err := jobs.CreateJob(ctx, connect.NewRequest(remoteJob("invoice", map[string]any{"customer": 42}))); err != nil {
		t.Fatal(err)
	}
	trig, err := runs.TriggerJob(ctx, connect.NewRequest(&orreryv1.TriggerJobRequest{Job: &orreryv1.JobRef{Namespace: "billing", Name: "invoice"}}))
	if err != nil {
		t.Fatal(err)
	}
	runID := trig.Msg.GetRun().GetId()
	claim, err := workers.Claim(ctx, connect.NewRequest(&orreryv1.ClaimRequest{Worker: "w1", Types: []string{"echo"}, MaxTasks: 5}))
	if err != nil {
		t.Fatal(err)
	}
	if len(claim.Msg.GetTasks()) != 1 {
		var st, q string
		var adm *time.Time
		_ = pool.QueryRow(ctx, "SELECT status, queue, admitted_at FROM tasks").Scan(&st, &q, &adm)
		t.Logf("task %s %s %v offers %d river %d workers %d", st, q, adm, enginetest.Int(t, pool, "SELECT count(*) FROM remote_offers"),
			enginetest.Int(t, pool, "SELECT count(*) FROM river_job"), enginetest.Int(t, pool, "SELECT count(*) FROM workers"))
		t.Fatalf("claimed %d tasks, want 1", len(claim.Msg.GetTasks()))
	}
	task := claim.Msg.GetTasks()[0]
	var payload map[string]any
	if err := json.Unmarshal([]byte(task.GetPayloadJson()), &payload); err != nil || payload["customer"] != float64(42) {
		t.Fatalf("payload %q: %v", task.GetPayloadJson(), err)
	}
	if task.GetRunId() != runID || task.GetType() != "echo" || task.GetNamespace() != "billing" || task.GetJob() != "invoice" ||
		task.GetAttempt() != 1 || task.GetIdempotencyKey() != runID+"/main/1" || !task.GetDeadline().AsTime().After(task.GetLeaseExpiresAt().AsTime().Add(-time.Second)) {
		t.Fatalf("task %v", task)
	}
	hb, err := workers.Heartbeat(ctx, connect.NewRequest(&orreryv1.HeartbeatRequest{Worker: "w1",
		Attempts: []*orreryv1.HeldAttempt{{TaskId: task.GetTaskId(), FencingToken: task.GetFencingToken()}}}))
	if err != nil || len(hb.Msg.GetStop()) != 0 {
		t.Fatalf("heartbeat: %v %v", hb, err)
	}
	rep, err := workers.Report(ctx, connect.NewRequest(&orreryv1.ReportRequest{Worker: "w1", TaskId: task.GetTaskId(),
		FencingToken: task.GetFencingToken(), Success: true, Output: `{"invoice":"INV-1"}`}))
	if err != nil || !rep.Msg.GetAccepted() {
		t.Fatalf("report: %v %v", rep, err)
	}
	got, err := runs.GetRun(ctx, connect.NewRequest(&orreryv1.GetRunRequest{Id: runID}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Msg.GetRun().GetStatus() != "succeeded" {
		t.Fatalf("run %s", got.Msg.GetRun().GetStatus())
	}
	again, err := workers.Report(ctx, connect.NewRequest(&orreryv1.ReportRequest{Worker: "w1", TaskId: task.GetTaskId(),
		FencingToken: task.GetFencingToken(), Success: true}))
	if err != nil || again.Msg.GetAccepted() {
		t.Fatalf("a second report: %v %v", again, err)
	}
	// Another worker's name cannot report for w1's attempt.
	_, err = workers.Report(ctx, connect.NewRequest(&orreryv1.ReportRequest{Worker: "w2", TaskId: task.GetTaskId(),
		FencingToken: task.GetFencingToken(), Success: true}))
	if code(err) != connect.CodeNotFound {
		t.Fatalf("w2's report: %v", err)
	}
	wait := int32(1)
	none, err := workers.Claim(ctx, connect.NewRequest(&orreryv1.ClaimRequest{Worker: "w1", Types: []string{"echo"}, WaitSeconds: &wait}))
	if err != nil || len(none.Msg.GetTasks()) != 0 {
		t.Fatalf("idle claim: %v %v", none, err)
	}
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM remote_offers`); n != 0 {
		t.Fatalf("%d offers left", n)
	}
}

// A worker key claims only within its scope and its tenant: a claim naming
// a type or namespace beyond its key is refused naming the field; a
// namespace or a tenant it does not serve is never handed to it, however
// long it waits; the other tenant's worker claims its own.
func TestWorkerKeysServeTheirScope(t *testing.T) {
	t.Parallel()
	base, keys := authServer(t)
	create := func(key, ns, name string) {
		t.Helper()
		body := `{"metadata":{"name":"` + name + `","namespace":"` + ns + `"},"spec":{"schedule":{"at":"2099-01-01T00:00:00Z"},"run":{"worker":"echo"}}}`
		if _, code, out := post(t, base+"/orrery.v1.JobService/CreateJob", key, body); code != "" {
			t.Fatalf("create %s/%s: %s %s", ns, name, code, out)
		}
		if _, code, out := post(t, base+"/orrery.v1.RunService/TriggerJob", key, `{"job":{"namespace":"`+ns+`","name":"`+name+`"}}`); code != "" {
			t.Fatalf("trigger %s/%s: %s %s", ns, name, code, out)
		}
	}
	create(keys["admin"], "team-b", "outside") // default tenant, another namespace
	create(keys["other"], "team-a", "theirs")  // another tenant
	claim := func(key, body string) (string, string) {
		t.Helper()
		_, code, out := post(t, base+"/orrery.v1.WorkerService/Claim", key, body)
		return code, out
	}
	// Errors name fields as JSON does, the way the client wrote them.
	for body, want := range map[string]string{
		`{"worker":"w","types":["other"]}`:                        "types[0]",
		`{"worker":"w","types":["echo"],"namespaces":["team-b"]}`: "namespaces[0]",
		`{"worker":"w"}`:                                   "types",
		`{"worker":"","types":["echo"]}`:                   "worker",
		`{"worker":"w","types":["echo"],"maxTasks":101}`:   "maxTasks",
		`{"worker":"w","types":["echo"],"leaseSeconds":1}`: "leaseSeconds",
		`{"worker":"w","types":["echo"],"waitSeconds":31}`: "waitSeconds",
	} {
		if code, out := claim(keys["worker"], body); code != "invalid_argument" || !strings.Contains(out, want) {
			t.Errorf("claim %s: %s %s; want invalid_argument naming %s", body, code, out, want)
		}
	}
	if code, out := claim(keys["worker"], `{"worker":"w","types":["echo"],"waitSeconds":2}`); code != "" || strings.Contains(out, "taskId") {
		t.Fatalf("the scoped worker claimed: %s %s", code, out)
	}
	code, out := claim(keys["other-worker"], `{"worker":"w","types":["echo"],"waitSeconds":10}`)
	if code != "" || strings.Count(out, "taskId") != 1 || !strings.Contains(out, `"job":"theirs"`) {
		t.Fatalf("the other tenant's worker: %s %s", code, out)
	}
	// Nor can it read anything else of its tenant, though its principal
	// were granted a role.
	post(t, base+"/orrery.v1.AccessService/GrantRole", keys["admin"], `{"principal":"worker","role":"admin","namespace":"team-a"}`)
	if _, code, _ := post(t, base+"/orrery.v1.JobService/ListJobs", keys["worker"], `{}`); code != "permission_denied" {
		t.Fatalf("a worker key listing jobs: %q", code)
	}
}

// An offer whose task moved on without a claim (its run cancelled) is
// swept by the gateways, even when no worker of its type claims again.
func TestStaleOffersAreSwept(t *testing.T) {
	t.Parallel()
	base, pool := serveRemote(t)
	ctx := context.Background()
	jobs := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	runs := orreryv1connect.NewRunServiceClient(http.DefaultClient, base)
	workers := orreryv1connect.NewWorkerServiceClient(http.DefaultClient, base)
	if _, err := jobs.CreateJob(ctx, connect.NewRequest(remoteJob("stale", map[string]any{}))); err != nil {
		t.Fatal(err)
	}
	// A claim registers the worker's slots, so that the run is admitted.
	none := int32(0)
	if _, err := workers.Claim(ctx, connect.NewRequest(&orreryv1.ClaimRequest{Worker: "w1", Types: []string{"other"}, WaitSeconds: &none})); err != nil {
		t.Fatal(err)
	}
	trig, err := runs.TriggerJob(ctx, connect.NewRequest(&orreryv1.TriggerJobRequest{Job: &orreryv1.JobRef{Namespace: "billing", Name: "stale"}}))
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 20*time.Second, "the attempt is offered", func() bool {
		return enginetest.Int(t, pool, `SELECT count(*) FROM remote_offers`) == 1
	})
	if _, err := runs.CancelRun(ctx, connect.NewRequest(&orreryv1.CancelRunRequest{Id: trig.Msg.GetRun().GetId()})); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 20*time.Second, "the cancelled task's offer is swept", func() bool {
		return enginetest.Int(t, pool, `SELECT count(*) FROM remote_offers`) == 0
	})
}

// A worker key runs at most run.MaxWorkersPerKey worker names at once,
// declaring at most run.MaxSlotsPerKey slots together: before, one key
// could register any number of names of 10,000 slots each, and open its
// tenant's remote queue to millions of admitted tasks. A name it runs
// already claims again.
func TestWorkerKeysAreBounded(t *testing.T) {
	t.Parallel()
	base, keys := authServer(t)
	claim := func(name string, slots int) (string, string) {
		t.Helper()
		for {
			_, code, out := post(t, base+"/orrery.v1.WorkerService/Claim", keys["worker"],
				fmt.Sprintf(`{"worker":%q,"types":["echo"],"slots":%d,"waitSeconds":0}`, name, slots))
			if !strings.Contains(out, "claims a second with this key") {
				return code, out
			}
			time.Sleep(100 * time.Millisecond) // the key's claim rate: paced, as its Retry-After says
		}
	}
	if code, out := claim("big", run.MaxSlotsPerKey); code != "" {
		t.Fatalf("a worker of %d slots: %s %s", run.MaxSlotsPerKey, code, out)
	}
	if code, out := claim("more", 1); code != "resource_exhausted" || !strings.Contains(out, "declare at most 10000 together") {
		t.Errorf("one slot more: %s %s; want resource_exhausted naming the bound", code, out)
	}
	if code, out := claim("big", run.MaxSlotsPerKey); code != "" {
		t.Errorf("the same worker again: %s %s", code, out)
	}
	if code, out := claim("big", 9_901); code != "" { // leaves room for 99 workers of one slot
		t.Fatalf("the worker with fewer slots: %s %s", code, out)
	}
	for i := range run.MaxWorkersPerKey - 1 {
		if code, out := claim(fmt.Sprintf("w%03d", i), 1); code != "" {
			t.Fatalf("worker %d: %s %s", i, code, out)
		}
	}
	if code, out := claim("one-too-many", 0); code != "resource_exhausted" || !strings.Contains(out, "this key runs 100 live workers; a key runs at most 100") {
		t.Errorf("worker 101: %s %s; want resource_exhausted naming the bound", code, out)
	}
}

// A remote worker that declares its capacity is handed only attempts that
// fit what its running ones leave free; an attempt that fits it nowhere
// now stays for a worker it fits; a capacity that cannot be read is
// refused naming the field.
func TestRemoteClaimsFitTheWorkersCapacity(t *testing.T) {
	t.Parallel()
	base, pool := serveRemote(t)
	ctx := context.Background()
	jobs := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	runs := orreryv1connect.NewRunServiceClient(http.DefaultClient, base)
	workers := orreryv1connect.NewWorkerServiceClient(http.DefaultClient, base)
	j := remoteJob("train", map[string]any{})
	j.Spec.Defaults = &orreryv1.StepDefaults{Resources: &orreryv1.Resources{Cpu: "750m", Memory: "1Gi"}}
	if _, err := jobs.CreateJob(ctx, connect.NewRequest(j)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := runs.TriggerJob(ctx, connect.NewRequest(&orreryv1.TriggerJobRequest{Job: &orreryv1.JobRef{Namespace: "billing", Name: "train"}, IgnoreOverlap: true})); err != nil {
			t.Fatal(err)
		}
	}
	wait := int32(1)
	claim := func(name, cpu string) []*orreryv1.RemoteTask {
		t.Helper()
		c, err := workers.Claim(ctx, connect.NewRequest(&orreryv1.ClaimRequest{Worker: name, Types: []string{"echo"}, MaxTasks: 5, Slots: 10,
			WaitSeconds: &wait, Capacity: &orreryv1.Resources{Cpu: cpu, Memory: "4Gi"}}))
		if err != nil {
			t.Fatalf("claim of %s: %v", name, err)
		}
		return c.Msg.GetTasks()
	}
	if got := claim("tiny", "500m"); len(got) != 0 {
		t.Fatalf("a worker of 500m claimed %d attempts of 750m", len(got))
	}
	first := claim("one-core", "1")
	if len(first) != 1 {
		t.Fatalf("a worker of one core claimed %d attempts of 750m, want 1", len(first))
	}
	if got := claim("one-core", "1"); len(got) != 0 {
		t.Fatalf("holding 750m of 1 core, it claimed %d more", len(got))
	}
	if rep, err := workers.Report(ctx, connect.NewRequest(&orreryv1.ReportRequest{Worker: "one-core", TaskId: first[0].GetTaskId(),
		FencingToken: first[0].GetFencingToken(), Success: true})); err != nil || !rep.Msg.GetAccepted() {
		t.Fatalf("report: %v %v", rep, err)
	}
	if got := claim("one-core", "1"); len(got) != 1 {
		t.Fatalf("with its core free again it claimed %d, want 1", len(got))
	}
	if got := claim("eight-cores", "8"); len(got) != 1 {
		t.Fatalf("a worker of eight cores claimed %d, want the one left", len(got))
	}
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM tasks WHERE status = 'running' AND res_cpu = 750`); n != 2 {
		t.Errorf("%d attempts running, want 2", n)
	}
	// A worker behind more large offers than one claim used to look at
	// (four per attempt it may take) still finds the small one that fits
	// the 250m it has left.
	big := remoteJob("big", map[string]any{})
	big.Spec.Defaults = &orreryv1.StepDefaults{Resources: &orreryv1.Resources{Cpu: "2"}}
	small := remoteJob("small", map[string]any{})
	small.Spec.Defaults = &orreryv1.StepDefaults{Resources: &orreryv1.Resources{Cpu: "250m"}}
	for j, n := range map[*orreryv1.CreateJobRequest]int{big: 8, small: 1} {
		if _, err := jobs.CreateJob(ctx, connect.NewRequest(j)); err != nil {
			t.Fatal(err)
		}
		for range n {
			if _, err := runs.TriggerJob(ctx, connect.NewRequest(&orreryv1.TriggerJobRequest{Job: &orreryv1.JobRef{Namespace: "billing", Name: j.Metadata.Name}, IgnoreOverlap: true})); err != nil {
				t.Fatal(err)
			}
		}
		enginetest.WaitFor(t, 30*time.Second, "the offers are out", func() bool {
			return enginetest.Int(t, pool, `SELECT count(*) FROM remote_offers o JOIN tasks k ON k.id = o.task_id JOIN runs r ON r.id = k.run_id JOIN jobs x ON x.id = r.job_id
				WHERE x.name = $1`, j.Metadata.Name) == n
		})
	}
	c, err := workers.Claim(ctx, connect.NewRequest(&orreryv1.ClaimRequest{Worker: "one-core", Types: []string{"echo"}, MaxTasks: 1, Slots: 10,
		WaitSeconds: &wait, Capacity: &orreryv1.Resources{Cpu: "1", Memory: "4Gi"}}))
	if err != nil || len(c.Msg.GetTasks()) != 1 {
		t.Fatalf("a worker with 250m left, behind 8 offers of 2 cores, claimed %v (%v), want the small one", c, err)
	}
	_, err = workers.Claim(ctx, connect.NewRequest(&orreryv1.ClaimRequest{Worker: "bad", Types: []string{"echo"},
		Capacity: &orreryv1.Resources{Memory: "lots"}}))
	if code(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), `capacity.memory: "lots" is not a quantity`) {
		t.Errorf("a capacity that cannot be read: %v", err)
	}
}

// A remote worker reports several attempts' ends in one call (ends), one
// transaction: each end's answer in order, a stale one refused and
// recorded; a request that names an attempt not started on the worker, an
// attempt twice, a bad field of one end or too many ends is refused naming
// the field, with nothing written.
func TestARemoteWorkerReportsSeveralEndsAtOnce(t *testing.T) {
	t.Parallel()
	base, pool := serveRemote(t)
	ctx := context.Background()
	jobs := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	runs := orreryv1connect.NewRunServiceClient(http.DefaultClient, base)
	workers := orreryv1connect.NewWorkerServiceClient(http.DefaultClient, base)
	if _, err := jobs.CreateJob(ctx, connect.NewRequest(remoteJob("batch", map[string]any{}))); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := runs.TriggerJob(ctx, connect.NewRequest(&orreryv1.TriggerJobRequest{Job: &orreryv1.JobRef{Namespace: "billing", Name: "batch"}, IgnoreOverlap: true})); err != nil {
			t.Fatal(err)
		}
	}
	var tasks []*orreryv1.RemoteTask
	enginetest.WaitFor(t, 30*time.Second, "three claimed", func() bool {
		wait := int32(1)
		c, err := workers.Claim(ctx, connect.NewRequest(&orreryv1.ClaimRequest{Worker: "w1", Types: []string{"echo"}, MaxTasks: 5, WaitSeconds: &wait}))
		if err == nil {
			tasks = append(tasks, c.Msg.GetTasks()...)
		}
		return len(tasks) == 3
	})
	end := func(t *orreryv1.RemoteTask, ok bool) *orreryv1.AttemptEnd {
		e := &orreryv1.AttemptEnd{TaskId: t.GetTaskId(), FencingToken: t.GetFencingToken(), Success: ok}
		if !ok {
			e.Error, e.ExitReason = "no stock", "error"
		}
		return e
	}
	// The first attempt's end, reported alone: taken.
	if rep, err := workers.Report(ctx, connect.NewRequest(&orreryv1.ReportRequest{Worker: "w1", TaskId: tasks[0].GetTaskId(),
		FencingToken: tasks[0].GetFencingToken(), Success: true})); err != nil || !rep.Msg.GetAccepted() {
		t.Fatalf("a report of one: %v %v", rep, err)
	}
	ended := func() int {
		return enginetest.Int(t, pool, `SELECT count(*) FROM runs WHERE finished_at IS NOT NULL`)
	}
	many := make([]*orreryv1.AttemptEnd, 501)
	for i := range many {
		many[i] = end(tasks[1], true)
	}
	for _, tt := range []struct {
		name string
		req  *orreryv1.ReportRequest
		code connect.Code
		want string
	}{
		{"ends beside one end's fields", &orreryv1.ReportRequest{Worker: "w1", TaskId: tasks[1].GetTaskId(), Ends: []*orreryv1.AttemptEnd{end(tasks[2], true)}},
			connect.CodeInvalidArgument, "ends"},
		{"an attempt twice", &orreryv1.ReportRequest{Worker: "w1", Ends: []*orreryv1.AttemptEnd{end(tasks[1], true), end(tasks[2], true), end(tasks[1], false)}},
			connect.CodeInvalidArgument, "ends[2].task_id"},
		{"a bad exit reason", &orreryv1.ReportRequest{Worker: "w1", Ends: []*orreryv1.AttemptEnd{end(tasks[1], true), {TaskId: tasks[2].GetTaskId(), FencingToken: tasks[2].GetFencingToken(), ExitReason: "oom"}}},
			connect.CodeInvalidArgument, "ends[1].exit_reason"},
		{"not a task id", &orreryv1.ReportRequest{Worker: "w1", Ends: []*orreryv1.AttemptEnd{{TaskId: "x"}}},
			connect.CodeInvalidArgument, "ends[0].task_id"},
		{"an attempt not started on the worker", &orreryv1.ReportRequest{Worker: "w1", Ends: []*orreryv1.AttemptEnd{end(tasks[1], true), {TaskId: uuid.NewString(), FencingToken: 1, Success: true}}},
			connect.CodeNotFound, "ends[1]"},
		{"another worker's attempts", &orreryv1.ReportRequest{Worker: "w2", Ends: []*orreryv1.AttemptEnd{end(tasks[1], true), end(tasks[2], true)}},
			connect.CodeNotFound, "ends[0]"},
		{"too many", &orreryv1.ReportRequest{Worker: "w1", Ends: many}, connect.CodeInvalidArgument, "501 ends; at most 500"},
	} {
		_, err := workers.Report(ctx, connect.NewRequest(tt.req))
		if code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want %v naming %q", tt.name, err, tt.code, tt.want)
		}
		if n := ended(); n != 1 {
			t.Fatalf("%s: %d runs ended; want only the first (nothing written)", tt.name, n)
		}
	}
	// The three in one report: the first again (stale), a success, a failure.
	rep, err := workers.Report(ctx, connect.NewRequest(&orreryv1.ReportRequest{Worker: "w1",
		Ends: []*orreryv1.AttemptEnd{end(tasks[0], true), end(tasks[1], true), end(tasks[2], false)}}))
	if err != nil || rep.Msg.GetAccepted() || fmt.Sprint(rep.Msg.GetAcceptedEnds()) != "[false true true]" {
		t.Fatalf("the report of three: %v %v; want [false true true]", rep, err)
	}
	for i, want := range []string{"succeeded", "succeeded", "failed"} {
		got, err := runs.GetRun(ctx, connect.NewRequest(&orreryv1.GetRunRequest{Id: tasks[i].GetRunId()}))
		if err != nil || got.Msg.GetRun().GetStatus() != want {
			t.Errorf("run of ends[%d]: %v %v; want %s", i, got.Msg.GetRun().GetStatus(), err, want)
		}
	}
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM attempts WHERE late_at IS NOT NULL`); n != 1 {
		t.Errorf("%d late reports recorded; want the stale one", n)
	}
}
