package api_test

import (
	"encoding/json"
	"io/fs"
	"math"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/examples"
)

// createSeeds are CreateJob requests, valid and hostile, as wire bytes.
func createSeeds() [][]byte {
	var reqs []*orreryv1.CreateJobRequest
	add := func(edit func(r *orreryv1.CreateJobRequest)) {
		r := sampleJob("fuzz")
		edit(r)
		reqs = append(reqs, r)
	}
	add(func(*orreryv1.CreateJobRequest) {})
	add(func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule = &orreryv1.Schedule{At: "0001-01-01T00:00:00Z"} })
	add(func(r *orreryv1.CreateJobRequest) {
		r.Spec.Schedule = &orreryv1.Schedule{At: "2026-12-31T23:59:59+01:00"}
	})
	add(func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule.Cron = "0 0 31 2 *" })
	add(func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule.Cron = "0 0 29 2 *" })
	add(func(r *orreryv1.CreateJobRequest) { r.Spec.Schedule.Cron = "@every 90s" })
	add(func(r *orreryv1.CreateJobRequest) { r.Spec.Payload = nested(70) })
	add(func(r *orreryv1.CreateJobRequest) { r.Spec.Payload = structpb.NewNumberValue(9007199254740993) })
	add(func(r *orreryv1.CreateJobRequest) { r.Spec.Payload = structpb.NewNumberValue(math.Inf(-1)) })
	add(func(r *orreryv1.CreateJobRequest) { r.Spec.Payload = &structpb.Value{} })
	add(func(r *orreryv1.CreateJobRequest) {
		r.Spec.Payload, _ = structpb.NewValue(map[string]any{"a": []any{1.5, -2, "x", nil, true, map[string]any{}}})
	})
	add(func(r *orreryv1.CreateJobRequest) { r.Spec = nil })
	add(func(r *orreryv1.CreateJobRequest) { r.Metadata = nil })
	add(func(r *orreryv1.CreateJobRequest) {
		r.Spec.Run = &orreryv1.Executor{Kind: &orreryv1.Executor_Command{}}
		r.Spec.Defaults = &orreryv1.StepDefaults{Timeout: &durationpb.Duration{Seconds: math.MaxInt64}, Retry: &orreryv1.RetryPolicy{Initial: &durationpb.Duration{Seconds: -1, Nanos: 5}}}
	})
	add(func(r *orreryv1.CreateJobRequest) {
		r.Spec.Run, r.Spec.Payload = nil, nil
		h := func(name string, needs ...string) *orreryv1.Step {
			return &orreryv1.Step{Name: name, Needs: needs, Run: &orreryv1.Executor{Kind: &orreryv1.Executor_Handler{Handler: "h"}}}
		}
		r.Spec.Steps = []*orreryv1.Step{h("a", "c"), h("b", "a"), h("c", "b", "b"), h("d", "d"), h("a"), {Name: "e", Run: &orreryv1.Executor{Kind: &orreryv1.Executor_Http{}}}}
	})
	out := make([][]byte, len(reqs))
	for i, r := range reqs {
		b, err := proto.Marshal(r)
		if err != nil {
			panic(err)
		}
		out[i] = b
	}
	return out
}

// FuzzResourceFromProto decodes CreateJob requests from the wire and runs
// what CreateJob does before the database: ResourceFromProto, Normalize,
// Validate. Nothing may panic; every problem names a field; what is
// accepted has a schedule that validates and fires, can be stored as JSON,
// and survives the trip back to protobuf and in again unchanged (what
// `jobs get` shows and `apply` sends). Seeds: testdata/fuzz and createSeeds.
func FuzzResourceFromProto(f *testing.F) {
	for _, b := range createSeeds() {
		f.Add(b)
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req orreryv1.CreateJobRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		r := api.ResourceFromProto(req.GetMetadata(), req.GetSpec())
		r.Normalize()
		if es := dag.Validate(&r); len(es) > 0 {
			for _, e := range es {
				if e.Field == "" || e.Message == "" {
					t.Fatalf("error without field or message: %+v", e)
				}
			}
			return
		}
		s, err := schedule.Validate(r.Spec.Schedule)
		if err != nil {
			t.Fatalf("accepted schedule %+v: %v", r.Spec.Schedule, err)
		}
		if _, ok := s.Next(from); !s.OneTime() && !ok {
			t.Fatalf("accepted schedule %+v never fires", r.Spec.Schedule)
		}
		if _, err := json.Marshal(r.Spec); err != nil {
			t.Fatalf("no JSON form: %v", err)
		}
		md, spec := api.ResourceToProto(r)
		if _, err := protojson.Marshal(spec); err != nil {
			t.Fatalf("the job cannot be answered as JSON: %v", err)
		}
		back := api.ResourceFromProto(md, spec)
		back.Normalize()
		if !sameResource(r, back) {
			a, _ := json.Marshal(r)
			b, _ := json.Marshal(back)
			t.Fatalf("the round trip through protobuf changed the job:\n%s\n%s", a, b)
		}
	})
}

// sameResource compares two resources as stored, payloads by value (a
// double's text may differ: 1e-7 and 1e-07).
func sameResource(a, b dag.Resource) bool {
	norm := func(r dag.Resource) any {
		for i := range r.Spec.Steps {
			st := &r.Spec.Steps[i]
			var v any
			if len(st.Payload) > 0 && json.Unmarshal(st.Payload, &v) == nil {
				b, _ := json.Marshal(v)
				st.Payload = b
			}
		}
		j, _ := json.Marshal(r)
		var out any
		_ = json.Unmarshal(j, &out)
		return out
	}
	a.Spec.Steps = append([]dag.Step(nil), a.Spec.Steps...)
	b.Spec.Steps = append([]dag.Step(nil), b.Spec.Steps...)
	return reflect.DeepEqual(norm(a), norm(b))
}

// TestExamplesRoundTrip: every example job (they use most of the spec:
// params, conditions, fan-out, schedule.after, remote steps) survives the
// round trip through the API's protobuf form, so that a field the spec
// has and the API forgets is caught (a step's for_each once was).
func TestExamplesRoundTrip(t *testing.T) {
	names, _ := fs.Glob(examples.FS(), "*.yaml")
	for _, name := range names {
		data, _ := examples.FS().ReadFile(name)
		docs, es := dag.Decode(name, data)
		if len(es) > 0 {
			t.Fatal(es)
		}
		for _, d := range docs {
			md, spec := api.ResourceToProto(d.Resource)
			back := api.ResourceFromProto(md, spec)
			back.Normalize()
			if !sameResource(d.Resource, back) {
				a, _ := json.Marshal(d.Resource)
				b, _ := json.Marshal(back)
				t.Errorf("%s: the round trip through protobuf changed the job:\n%s\n%s", name, a, b)
			}
		}
	}
}
