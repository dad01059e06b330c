package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// startServer serves the API (jobs, runs, pipelines, cluster, audit) on a
// free port, as `orrery serve` does; count sums the rows of every table a
// rejected call could have written.
func startServer(t *testing.T) (baseURL string, count func() int) {
	t.Helper()
	base, pool := servePool(t)
	return base, func() int {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM audit_log)
			+ (SELECT count(*) FROM job_versions) + (SELECT count(*) FROM runs) + (SELECT count(*) FROM idempotency_keys)
			+ (SELECT count(*) FROM namespaces)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// servePool is startServer's server (authentication off), with its pool,
// for tests that write rows directly.
func servePool(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.Listen("127.0.0.1:0", api.NewHandler(api.Services{Jobs: jobs, Runs: run.NewService(pool, jobs, nil), State: pool, Auth: api.NoAuth{}}, nil))
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

func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func sampleJob(name string) *orreryv1.CreateJobRequest {
	payload, _ := structpb.NewValue(map[string]any{"source": "pos"})
	return &orreryv1.CreateJobRequest{
		Metadata: &orreryv1.JobMetadata{Name: name, Namespace: "analytics", Labels: map[string]string{"team": "data"}},
		Spec: &orreryv1.JobSpec{
			Schedule: &orreryv1.Schedule{Cron: "0 2 * * *", Timezone: "America/New_York"},
			Run:      &orreryv1.Executor{Kind: &orreryv1.Executor_Http{Http: &orreryv1.HttpExecutor{Url: "http://127.0.0.1:9/x"}}},
			Payload:  payload,
		},
	}
}

func code(err error) connect.Code { return connect.CodeOf(err) }

func TestJobLifecycleOverConnectAndGRPC(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		client orreryv1connect.JobServiceClient
	}{
		{"connect", orreryv1connect.NewJobServiceClient(http.DefaultClient, base)},
		{"grpc", orreryv1connect.NewJobServiceClient(h2cClient(), base, connect.WithGRPC())},
		{"grpcweb", orreryv1connect.NewJobServiceClient(http.DefaultClient, base, connect.WithGRPCWeb())},
	} {
		c := tc.client
		name := "etl-" + tc.name
		created, err := c.CreateJob(ctx, connect.NewRequest(sampleJob(name)))
		if err != nil {
			t.Fatalf("%s: create: %v", tc.name, err)
		}
		j := created.Msg.GetJob()
		if j.GetVersion() != 1 || j.GetStatus() != orreryv1.JobStatus_JOB_STATUS_ACTIVE || j.GetNextFireTime() == nil {
			t.Fatalf("%s: created %v", tc.name, j)
		}
		got, err := c.GetJob(ctx, connect.NewRequest(&orreryv1.GetJobRequest{Ref: &orreryv1.JobRef{Namespace: "analytics", Name: name}}))
		if err != nil || len(got.Msg.GetNextFireTimes()) != 10 || got.Msg.GetJob().GetSpec().GetSteps()[0].GetPayload().GetStructValue().GetFields()["source"].GetStringValue() != "pos" {
			t.Fatalf("%s: get %v %v", tc.name, got, err)
		}
		upd := sampleJob(name)
		upd.Spec.Schedule.Cron = "0 3 * * *"
		ref := &orreryv1.JobRef{Id: j.GetId()}
		if _, err := c.UpdateJob(ctx, connect.NewRequest(&orreryv1.UpdateJobRequest{Ref: ref, Metadata: upd.Metadata, Spec: upd.Spec, ExpectedVersion: 1})); err != nil {
			t.Fatalf("%s: update: %v", tc.name, err)
		}
		_, err = c.UpdateJob(ctx, connect.NewRequest(&orreryv1.UpdateJobRequest{Ref: ref, Metadata: upd.Metadata, Spec: sampleJob(name).Spec, ExpectedVersion: 1}))
		if code(err) != connect.CodeAborted {
			t.Fatalf("%s: stale update: %v", tc.name, err)
		}
		p, err := c.PauseJob(ctx, connect.NewRequest(&orreryv1.PauseJobRequest{Ref: ref}))
		if err != nil || p.Msg.GetJob().GetStatus() != orreryv1.JobStatus_JOB_STATUS_PAUSED {
			t.Fatalf("%s: pause %v", tc.name, err)
		}
		if _, err := c.ResumeJob(ctx, connect.NewRequest(&orreryv1.ResumeJobRequest{Ref: ref})); err != nil {
			t.Fatalf("%s: resume %v", tc.name, err)
		}
		if _, err := c.DeleteJob(ctx, connect.NewRequest(&orreryv1.DeleteJobRequest{Ref: ref})); err != nil {
			t.Fatalf("%s: delete %v", tc.name, err)
		}
		if _, err := c.PauseJob(ctx, connect.NewRequest(&orreryv1.PauseJobRequest{Ref: ref})); code(err) != connect.CodeFailedPrecondition {
			t.Fatalf("%s: pause deleted: %v", tc.name, err)
		}
		if _, err := c.GetJob(ctx, connect.NewRequest(&orreryv1.GetJobRequest{Ref: &orreryv1.JobRef{Name: "nope"}})); code(err) != connect.CodeNotFound {
			t.Fatalf("%s: get missing: %v", tc.name, err)
		}
	}
}

func TestBadInputIsInvalidArgumentWithFieldAndChangesNothing(t *testing.T) {
	t.Parallel()
	base, count := startServer(t)
	c := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	ctx := context.Background()
	before := count()
	tests := []struct {
		name  string
		edit  func(*orreryv1.CreateJobRequest)
		field string
	}{
		{"cron minute", func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule.Cron = "61 * * * *" }, "spec.schedule.cron: minute field"},
		{"zone", func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule.Timezone = "Moon/Base" }, "spec.schedule.timezone"},
		{"at", func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule = &orreryv1.Schedule{At: "2026-13-01"} }, "spec.schedule.at"},
		{"empty name", func(r *orreryv1.CreateJobRequest) { r.Metadata.Name = "" }, "metadata.name"},
		{"long name", func(r *orreryv1.CreateJobRequest) { r.Metadata.Name = strings.Repeat("n", 64) }, "metadata.name"},
		{"bad name", func(r *orreryv1.CreateJobRequest) { r.Metadata.Name = "-x" }, "metadata.name"},
		{"no executor", func(r *orreryv1.CreateJobRequest) { r.Spec.Run = &orreryv1.Executor{} }, "spec.steps[0].run"},
		{"big payload", func(r *orreryv1.CreateJobRequest) {
			r.Spec.Payload = structpb.NewStringValue(strings.Repeat("p", 300<<10))
		}, "spec.steps[0].payload"},
		{"negative retries", func(r *orreryv1.CreateJobRequest) {
			r.Spec.Defaults = &orreryv1.StepDefaults{Retry: &orreryv1.RetryPolicy{MaxAttempts: -1}}
		}, "spec.defaults.retry.max_attempts"},
	}
	for _, tt := range tests {
		req := sampleJob("fresh")
		tt.edit(req)
		_, err := c.CreateJob(ctx, connect.NewRequest(req))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.Contains(ce.Message(), tt.field) {
			t.Errorf("%s: got %v, want InvalidArgument naming %s", tt.name, err, tt.field)
		}
	}
	if _, err := c.CreateJob(ctx, connect.NewRequest(sampleJob("dup"))); err != nil {
		t.Fatal(err)
	}
	mid := count()
	if _, err := c.CreateJob(ctx, connect.NewRequest(sampleJob("dup"))); code(err) != connect.CodeAlreadyExists {
		t.Fatalf("duplicate: %v", err)
	}
	if before == mid || count() != mid {
		t.Fatalf("rows: %d before, %d after the good create, %d after the rejected ones", before, mid, count())
	}
}

func TestIdempotencyKeyOverTheWire(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t)
	c := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	ctx := context.Background()
	req := sampleJob("idem")
	req.IdempotencyKey = "deploy-42"
	first, err := c.CreateJob(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateJob(ctx, connect.NewRequest(req))
	if err != nil || again.Msg.GetJob().GetId() != first.Msg.GetJob().GetId() {
		t.Fatalf("replay: %v %v", again, err)
	}
	req.Spec.Schedule.Cron = "0 5 * * *"
	if _, err := c.CreateJob(ctx, connect.NewRequest(req)); code(err) != connect.CodeAlreadyExists {
		t.Fatalf("different body under the same key: %v", err)
	}
}

func TestPreviewAndListPaging(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t)
	c := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	ctx := context.Background()
	from := timestamppb.New(time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC))
	res, err := c.PreviewSchedule(ctx, connect.NewRequest(&orreryv1.PreviewScheduleRequest{
		Schedule: &orreryv1.Schedule{Cron: "30 2 * * *", Timezone: "America/New_York"}, From: from, Count: 2,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.GetFireTimes(); len(got) != 2 || got[0].AsTime().Format(time.RFC3339) != "2026-03-08T07:00:00Z" {
		t.Fatalf("preview %v", got)
	}
	for _, n := range []string{"c", "a", "d", "b", "e"} {
		if _, err := c.CreateJob(ctx, connect.NewRequest(sampleJob(n))); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	req := &orreryv1.ListJobsRequest{PageSize: 2, Labels: map[string]string{"team": "data"}}
	for {
		page, err := c.ListJobs(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Msg.GetJobs() {
			names = append(names, j.GetMetadata().GetName())
		}
		if req.PageToken = page.Msg.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if strings.Join(names, "") != "abcde" {
		t.Fatalf("pages %v", names)
	}
}

func TestReflectionHealthAndPlainJSON(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t)
	ctx := context.Background()
	stream := grpcreflect.NewClient(h2cClient(), base).NewStream(ctx)
	services, err := stream.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = stream.Close()
	if !slices.Contains(services, protoreflect.FullName(orreryv1connect.JobServiceName)) {
		t.Fatalf("reflection lists %v", services)
	}
	for path, want := range map[string]string{
		"/grpc.health.v1.Health/Check":          `{"status":"SERVING_STATUS_SERVING"}`,
		"/orrery.v1.JobService/PreviewSchedule": `{"fireTimes":["2026-01-01T00:01:00Z"],"instants":[{"instant":"2026-01-01T00:01:00Z","fireTime":"2026-01-01T00:01:00Z"}]}`,
	} {
		body := `{}`
		if strings.Contains(path, "Preview") {
			body = `{"schedule":{"cron":"* * * * *"},"from":"2026-01-01T00:00:00Z","count":1}`
		}
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.ReplaceAll(string(b), " ", "") != want {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
	}
}

// A JSON request naming a field its message does not have is refused,
// naming the field's path, top-level or nested; a known field written in
// its proto name is read as protojson reads it.
func TestUnknownJSONFieldsAreRefused(t *testing.T) {
	base, _ := startServer(t)
	for _, c := range []struct {
		body string
		code int
		want string
	}{
		{`{"schedule":{"cron":"* * * * *"},"from":"2026-01-01T00:00:00Z","count":1,"cuont":2}`, 400, "cuont: unknown field"},
		{`{"schedule":{"cron":"* * * * *","timezon":"UTC"},"from":"2026-01-01T00:00:00Z","count":1}`, 400, "schedule.timezon: unknown field"},
		{`{"schedule":{"cron":"* * * * *","exclude":{"dates":["2026-12-24"],"crons":[]}},"from":"2026-01-01T00:00:00Z","count":1}`, 400, "schedule.exclude.crons: unknown field"},
		{`{"schedule":{"cron":"* * * * *","catchup_window":"60s"},"from":"2026-01-01T00:00:00Z","count":1}`, 200, ""},
	} {
		resp, err := http.Post(base+"/orrery.v1.JobService/PreviewSchedule", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s; want %d ...%s...", c.body, resp.StatusCode, b, c.code, c.want)
		}
	}
}
