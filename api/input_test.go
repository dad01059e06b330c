package api_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
)

// nested is a payload of depth arrays, one inside the other.
func nested(depth int) *structpb.Value {
	v := structpb.NewNumberValue(1)
	for range depth {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	return v
}

// wantInvalid checks that err is InvalidArgument (not a dropped connection)
// and names want.
func wantInvalid(t *testing.T, name string, err error, want string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.Contains(ce.Message(), want) {
		t.Errorf("%s: got %v, want InvalidArgument naming %q", name, err, want)
	}
}

// Zero and out-of-range times, cron expressions that never fire, payloads
// nested too deep and integers that a double would round are
// InvalidArgument naming the field, from CreateJob, UpdateJob, Apply and
// Plan alike; the connection stays up and nothing is written.
func TestHostileJobsAreInvalidArgumentAndWriteNothing(t *testing.T) {
	t.Parallel()
	base, count := startServer(t)
	ctx := context.Background()
	jobs := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	pipes := orreryv1connect.NewPipelineServiceClient(http.DefaultClient, base)
	created, err := jobs.CreateJob(ctx, connect.NewRequest(sampleJob("existing")))
	if err != nil {
		t.Fatal(err)
	}
	before := count()
	tests := []struct {
		name  string
		edit  func(*orreryv1.CreateJobRequest)
		field string
	}{
		{"zero at", func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule = &orreryv1.Schedule{At: "0001-01-01T00:00:00Z"} },
			`spec.schedule.at: "0001-01-01T00:00:00Z" is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z`},
		{"year zero", func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule = &orreryv1.Schedule{At: "0000-01-01T00:00:00Z"} }, "spec.schedule.at"},
		{"before 1970", func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule = &orreryv1.Schedule{At: "1969-07-20T20:17:40Z"} }, "spec.schedule.at"},
		{"after 9999", func(r *orreryv1.CreateJobRequest) {
			r.Spec.Schedule = &orreryv1.Schedule{At: "9999-12-31T23:59:59-14:00"}
		}, "spec.schedule.at"},
		{"31 February", func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule.Cron = "0 0 31 2 *" },
			`spec.schedule.cron: "0 0 31 2 *" never fires: no date in the calendar has day-of-month 31 in month 2`},
		{"31 June with seconds", func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule.Cron = "0 0 12 31 6 *" }, `spec.schedule.cron: "0 0 12 31 6 *" never fires`},
		{"29 February on Sundays", func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule.Cron = "0 0 29 2 */7" }, `spec.schedule.cron: "0 0 29 2 */7" fires too rarely`},
		{"65 deep", func(r *orreryv1.CreateJobRequest) { r.Spec.Payload = nested(65) },
			"spec.steps[0].payload: nests arrays and objects more than 64 levels deep; the limit is 64"},
		{"5,000 deep", func(r *orreryv1.CreateJobRequest) { r.Spec.Payload = nested(5000) }, ""},
		{"2^53+1", func(r *orreryv1.CreateJobRequest) {
			r.Spec.Payload, _ = structpb.NewValue(map[string]any{"id": float64(9007199254740993)})
		}, "spec.steps[0].payload: number 9007199254740992 is beyond ±9007199254740991 (2^53-1), the limit"},
		{"1e300", func(r *orreryv1.CreateJobRequest) { r.Spec.Payload = structpb.NewNumberValue(1e300) }, "spec.steps[0].payload: number 1e+300 is beyond ±9007199254740991"},
		{"NaN", func(r *orreryv1.CreateJobRequest) { r.Spec.Payload = structpb.NewNumberValue(math.NaN()) }, "spec.steps[0].payload: is not valid JSON"},
		{"step payload", func(r *orreryv1.CreateJobRequest) {
			r.Spec.Run, r.Spec.Payload = nil, nil
			r.Spec.Steps = []*orreryv1.Step{{Name: "a", Run: &orreryv1.Executor{Kind: &orreryv1.Executor_Handler{Handler: "h"}}, Payload: nested(100)}}
		}, "spec.steps[0].payload: nests"},
	}
	for _, tt := range tests {
		req := sampleJob("fresh")
		tt.edit(req)
		_, err := jobs.CreateJob(ctx, connect.NewRequest(req))
		wantInvalid(t, "create "+tt.name, err, tt.field)

		upd := sampleJob("existing")
		tt.edit(upd)
		_, err = jobs.UpdateJob(ctx, connect.NewRequest(&orreryv1.UpdateJobRequest{
			Ref: &orreryv1.JobRef{Id: created.Msg.GetJob().GetId()}, Metadata: upd.Metadata, Spec: upd.Spec, ExpectedVersion: 1}))
		wantInvalid(t, "update "+tt.name, err, tt.field)

		item := &orreryv1.AppliedJob{Metadata: req.Metadata, Spec: req.Spec}
		field := tt.field
		if field != "" { // "": refused before conversion (protobuf's recursion limit)
			field = "jobs[0]." + field
		}
		_, err = pipes.Plan(ctx, connect.NewRequest(&orreryv1.PlanRequest{Jobs: []*orreryv1.AppliedJob{item}}))
		wantInvalid(t, "plan "+tt.name, err, field)
		_, err = pipes.Apply(ctx, connect.NewRequest(&orreryv1.ApplyRequest{Jobs: []*orreryv1.AppliedJob{item}}))
		wantInvalid(t, "apply "+tt.name, err, field)
	}
	if after := count(); after != before {
		t.Fatalf("rows: %d before the rejected calls, %d after", before, after)
	}
	got, err := jobs.GetJob(ctx, connect.NewRequest(&orreryv1.GetJobRequest{Ref: &orreryv1.JobRef{Namespace: "analytics", Name: "existing"}}))
	if err != nil || got.Msg.GetJob().GetVersion() != 1 || got.Msg.GetJob().GetSpec().GetSchedule().GetCron() != "0 2 * * *" {
		t.Fatalf("the job changed: %v %v", got, err)
	}
}

// A payload number sent as JSON text over Connect is a double once decoded:
// 2^53+1 is refused (naming the limit), not stored as 2^53. Numbers within
// ±(2^53-1) come back exactly; rare but real schedules are accepted.
func TestPayloadNumbersAndRareSchedulesOverTheWire(t *testing.T) {
	t.Parallel()
	base, count := startServer(t)
	ctx := context.Background()
	c := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	before := count()
	body := `{"metadata":{"name":"big-int"},"spec":{"schedule":{"cron":"@daily"},"run":{"handler":"h"},"payload":{"id":9007199254740993}}}`
	resp, err := http.Post(base+"/orrery.v1.JobService/CreateJob", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"invalid_argument"`) || !strings.Contains(string(b), "2^53-1") {
		t.Fatalf("JSON 2^53+1: %d %s", resp.StatusCode, b)
	}
	if count() != before {
		t.Fatal("a rejected create wrote rows")
	}

	req := sampleJob("exact")
	req.Spec.Schedule = &orreryv1.Schedule{Cron: "0 0 29 2 *"}
	req.Spec.Payload, _ = structpb.NewValue(map[string]any{"max": float64(1<<53 - 1), "min": -float64(1<<53 - 1), "f": 0.1})
	created, err := c.CreateJob(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	fields := created.Msg.GetJob().GetSpec().GetSteps()[0].GetPayload().GetStructValue().GetFields()
	if fields["max"].GetNumberValue() != 1<<53-1 || fields["min"].GetNumberValue() != -(1<<53-1) || fields["f"].GetNumberValue() != 0.1 {
		t.Fatalf("payload came back as %v", fields)
	}
	if next := created.Msg.GetJob().GetNextFireTime().AsTime(); next.Month() != time.February || next.Day() != 29 {
		t.Fatalf("29 February fires at %s", next)
	}
	for _, cron := range []string{"0 0 29 2 1", "0 0 31 * *", "0 0 13 * 5"} {
		r := sampleJob("rare-" + strings.NewReplacer(" ", "-", "*", "x").Replace(cron))
		r.Spec.Schedule.Cron = cron
		if _, err := c.CreateJob(ctx, connect.NewRequest(r)); err != nil {
			t.Errorf("%q: %v", cron, err)
		}
	}
}

// Times in requests (a preview's schedule and from, a run listing's since
// and until) are InvalidArgument naming the field when zero, invalid or
// out of range; a preview of a cron that never fires says so. The
// server keeps answering.
func TestRequestTimesAreCheckedAndPreviewRejectsNeverFiring(t *testing.T) {
	t.Parallel()
	base, count := startServer(t)
	ctx := context.Background()
	c := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	runs := orreryv1connect.NewRunServiceClient(http.DefaultClient, base)
	before := count()
	ts := func(s string) *timestamppb.Timestamp {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return timestamppb.New(v)
	}
	daily := &orreryv1.Schedule{Cron: "@daily"}
	previews := []struct {
		name  string
		req   *orreryv1.PreviewScheduleRequest
		field string
	}{
		{"zero at", &orreryv1.PreviewScheduleRequest{Schedule: &orreryv1.Schedule{At: "0001-01-01T00:00:00Z"}}, "schedule.at:"},
		{"at before 1970", &orreryv1.PreviewScheduleRequest{Schedule: &orreryv1.Schedule{At: "1900-01-01T00:00:00Z"}}, "schedule.at:"},
		{"31 February", &orreryv1.PreviewScheduleRequest{Schedule: &orreryv1.Schedule{Cron: "0 0 31 2 *"}}, "schedule.cron: \"0 0 31 2 *\" never fires"},
		{"zero from", &orreryv1.PreviewScheduleRequest{Schedule: daily, From: timestamppb.New(time.Time{})}, "from: 0001-01-01T00:00:00Z is outside"},
		{"from before 1970", &orreryv1.PreviewScheduleRequest{Schedule: daily, From: ts("1969-12-31T23:59:59Z")}, "from: 1969-12-31T23:59:59Z is outside"},
		{"from past 9999", &orreryv1.PreviewScheduleRequest{Schedule: daily, From: &timestamppb.Timestamp{Seconds: 253402300800}}, "from: not a valid timestamp"},
		{"from with bad nanos", &orreryv1.PreviewScheduleRequest{Schedule: daily, From: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}}, "from: not a valid timestamp"},
		{"from far negative", &orreryv1.PreviewScheduleRequest{Schedule: daily, From: &timestamppb.Timestamp{Seconds: math.MinInt64}}, "from: not a valid timestamp"},
	}
	for _, tt := range previews {
		_, err := c.PreviewSchedule(ctx, connect.NewRequest(tt.req))
		wantInvalid(t, "preview "+tt.name, err, tt.field)
	}
	listings := []struct {
		name  string
		req   *orreryv1.ListRunsRequest
		field string
	}{
		{"zero since", &orreryv1.ListRunsRequest{Since: timestamppb.New(time.Time{})}, "since: 0001-01-01T00:00:00Z is outside"},
		{"since past 9999", &orreryv1.ListRunsRequest{Since: &timestamppb.Timestamp{Seconds: math.MaxInt64}}, "since: not a valid timestamp"},
		{"zero until", &orreryv1.ListRunsRequest{Until: timestamppb.New(time.Time{})}, "until: 0001-01-01T00:00:00Z is outside"},
		{"until before 1970", &orreryv1.ListRunsRequest{Until: ts("1960-01-01T00:00:00Z")}, "until:"},
	}
	for _, tt := range listings {
		_, err := runs.ListRuns(ctx, connect.NewRequest(tt.req))
		wantInvalid(t, "list runs "+tt.name, err, tt.field)
	}

	// The bounds themselves are fine, and nothing comes back past 9999.
	res, err := c.PreviewSchedule(ctx, connect.NewRequest(&orreryv1.PreviewScheduleRequest{
		Schedule: &orreryv1.Schedule{Cron: "0 0 * * *"}, From: ts("9999-12-29T00:00:00Z"), Count: 10}))
	if err != nil || len(res.Msg.GetFireTimes()) != 2 {
		t.Fatalf("preview at the end of time: %v %v", res, err)
	}
	res, err = c.PreviewSchedule(ctx, connect.NewRequest(&orreryv1.PreviewScheduleRequest{
		Schedule: &orreryv1.Schedule{Cron: "0 0 29 2 *"}, From: ts("1970-01-01T00:00:00Z"), Count: 2}))
	if err != nil || len(res.Msg.GetFireTimes()) != 2 || res.Msg.GetFireTimes()[0].AsTime().Year() != 1972 {
		t.Fatalf("29 February from 1970: %v %v", res, err)
	}
	// Go's ZoneBounds misreports 31 December of leap years past a zone's
	// table (2040, 2044, ...); a preview across it used to spin forever.
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err = c.PreviewSchedule(short, connect.NewRequest(&orreryv1.PreviewScheduleRequest{
		Schedule: &orreryv1.Schedule{Cron: "0 0 1 1 *", Timezone: "America/New_York"}, From: ts("2040-12-30T00:00:00Z"), Count: 3}))
	if err != nil || len(res.Msg.GetFireTimes()) != 3 || res.Msg.GetFireTimes()[0].AsTime().Format(time.RFC3339) != "2041-01-01T05:00:00Z" {
		t.Fatalf("new year 2041 in New York: %v %v", res, err)
	}
	if _, err := runs.ListRuns(ctx, connect.NewRequest(&orreryv1.ListRunsRequest{Since: ts("1970-01-01T00:00:00Z"), Until: ts("9999-12-31T23:59:59Z")})); err != nil {
		t.Fatalf("list runs within bounds: %v", err)
	}
	if count() != before {
		t.Fatal("rejected calls wrote rows")
	}
}

// Fields of the other requests are bounded and checked too, each refused
// by name before anything is read or written: a run status or job status
// that does not exist (it matched nothing, or everything), a cancellation
// reason that is not text or too long (it was stored on the run and each
// task), a replay limit below zero (it replayed everything), a prune
// namespace no job could live in, an applied job's source of megabytes.
func TestOtherRequestFieldsAreCheckedByName(t *testing.T) {
	t.Parallel()
	base, count := startServer(t)
	ctx := context.Background()
	runs := orreryv1connect.NewRunServiceClient(http.DefaultClient, base)
	jobs := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	pipes := orreryv1connect.NewPipelineServiceClient(http.DefaultClient, base)
	before := count()
	id := uuid.Must(uuid.NewV7()).String()
	applied := func(path string) []*orreryv1.AppliedJob {
		r := sampleJob("src")
		return []*orreryv1.AppliedJob{{Metadata: r.Metadata, Spec: r.Spec, Source: &orreryv1.Source{Path: path, Commit: "abc"}}}
	}
	for _, tc := range []struct {
		name, field string
		call        func() error
	}{
		{"run status", "status", func() error {
			_, err := runs.ListRuns(ctx, connect.NewRequest(&orreryv1.ListRunsRequest{Status: "bogus"}))
			return err
		}},
		{"run status NUL", "status", func() error {
			_, err := runs.ListRuns(ctx, connect.NewRequest(&orreryv1.ListRunsRequest{Status: "\x00"}))
			return err
		}},
		{"job status", "status", func() error {
			_, err := jobs.ListJobs(ctx, connect.NewRequest(&orreryv1.ListJobsRequest{Status: 99}))
			return err
		}},
		{"reason NUL", "reason", func() error {
			_, err := runs.CancelRun(ctx, connect.NewRequest(&orreryv1.CancelRunRequest{Id: id, Reason: "\x00"}))
			return err
		}},
		{"long reason", "reason", func() error {
			_, err := runs.CancelRun(ctx, connect.NewRequest(&orreryv1.CancelRunRequest{Id: id, Reason: strings.Repeat("r", 3000)}))
			return err
		}},
		{"replay limit", "limit", func() error {
			_, err := runs.ReplayDeadLetters(ctx, connect.NewRequest(&orreryv1.ReplayDeadLettersRequest{Job: &orreryv1.JobRef{Name: "x"}, Limit: -1}))
			return err
		}},
		{"prune namespace", "namespaces[0]", func() error {
			_, err := pipes.Plan(ctx, connect.NewRequest(&orreryv1.PlanRequest{Prune: true, Namespaces: []string{"\x00"}}))
			return err
		}},
		{"source path", "jobs[0].source.path", func() error {
			_, err := pipes.Apply(ctx, connect.NewRequest(&orreryv1.ApplyRequest{Jobs: applied(strings.Repeat("p", 3000))}))
			return err
		}},
		{"source path NUL", "jobs[0].source.path", func() error {
			_, err := pipes.Apply(ctx, connect.NewRequest(&orreryv1.ApplyRequest{Jobs: applied("a\x00b")}))
			return err
		}},
	} {
		var ce *connect.Error
		if err := tc.call(); !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.Contains(ce.Message(), tc.field) {
			t.Errorf("%s: %v, want InvalidArgument naming %s", tc.name, err, tc.field)
		}
	}
	if after := count(); after != before {
		t.Fatalf("rows: %d before, %d after the refused requests", before, after)
	}
}
