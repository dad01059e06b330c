package api

import (
	"net/url"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// A field path in an error becomes JSON's names as far as it names
// fields: a map's keys, list indexes and what is not a field stay.
func TestJSONPaths(t *testing.T) {
	create := (&orreryv1.CreateJobRequest{}).ProtoReflect().Descriptor()
	list := (&orreryv1.ListJobsRequest{}).ProtoReflect().Descriptor()
	quota := (&orreryv1.SetTenantQuotaRequest{}).ProtoReflect().Descriptor()
	for in, want := range map[string]string{
		"spec.steps[2].for_each: too many":            "spec.steps[2].forEach: too many",
		"spec.params.page_size.enum: past 16 KiB":     "spec.params.page_size.enum: past 16 KiB", // a param named page_size
		"spec.schedule.catchup_window: negative":      "spec.schedule.catchupWindow: negative",
		"metadata.labels.team_name: empty\nspec.x: y": "metadata.labels.team_name: empty\nspec.x: y",
		"no path here: at all":                        "no path here: at all",
		"spec.payload.string_value[1]: a NUL":         "spec.payload.string_value[1]: a NUL", // a payload's own key
	} {
		if got := jsonPaths(in, create, nil); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	if got := jsonPaths("page_size: 900 is outside 0..500", list, nil); got != "pageSize: 900 is outside 0..500" {
		t.Errorf("a list's page size: %q", got)
	}
	if got := jsonPaths("max_concurrency|max_jobs: nothing to change", quota, nil); got != "maxConcurrency|maxJobs: nothing to change" {
		t.Errorf("alternatives: %q", got)
	}
	get := (&orreryv1.GetRunRequest{}).ProtoReflect().Descriptor()
	if got := jsonPaths("id: not a UUID", get, url.Values{"id": {"run_id"}}); got != "run_id: not a UUID" {
		t.Errorf("a path-bound field: %q", got)
	}
}

// A NUL anywhere in a request is found and named: a field, a map's key
// or value, a list's item, a payload's text.
func TestNULIsFoundAnywhere(t *testing.T) {
	payload, _ := structpb.NewValue(map[string]any{"a": []any{"x", "b\x00"}})
	for want, m := range map[string]*orreryv1.CreateJobRequest{
		"metadata.name":     {Metadata: &orreryv1.JobMetadata{Name: "a\x00"}},
		"metadata.labels":   {Metadata: &orreryv1.JobMetadata{Labels: map[string]string{"k\x00": "v"}}},
		"metadata.labels.k": {Metadata: &orreryv1.JobMetadata{Labels: map[string]string{"k": "v\x00"}}},
		"spec.payload.a[1]": {Spec: &orreryv1.JobSpec{Payload: payload}},
		"":                  {Metadata: &orreryv1.JobMetadata{Name: "clean", Labels: map[string]string{"k": "v"}}},
	} {
		if has := hasNUL(m.ProtoReflect()); has != (want != "") {
			t.Errorf("%s: hasNUL %v", want, has)
		}
		if got := nulAt(m.ProtoReflect(), ""); got != want {
			t.Errorf("nulAt: %q, want %q", got, want)
		}
	}
}

// BenchmarkHasNUL is the check every request pays: a small CreateJob.
func BenchmarkHasNUL(b *testing.B) {
	payload, _ := structpb.NewValue(map[string]any{"a": []any{"x", "y", map[string]any{"k": "v"}}, "b": "text"})
	req := &orreryv1.CreateJobRequest{
		Metadata: &orreryv1.JobMetadata{Name: "bench", Namespace: "ns", Labels: map[string]string{"team": "data", "tier": "gold"}},
		Spec: &orreryv1.JobSpec{Schedule: &orreryv1.Schedule{Cron: "*/5 * * * *"}, Payload: payload,
			Run: &orreryv1.Executor{Kind: &orreryv1.Executor_Http{Http: &orreryv1.HttpExecutor{Url: "http://127.0.0.1:9/hook"}}}},
	}
	for b.Loop() {
		if hasNUL(req.ProtoReflect()) {
			b.Fatal("a NUL")
		}
	}
}
