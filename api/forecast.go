package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/forecast"
	"github.com/orrery-dev/orrery/internal/job"
)

// maxForecastJobs bounds the stored jobs one forecast reads.
const maxForecastJobs = 20_000

func (s *pipelineServer) Forecast(ctx context.Context, req *connect.Request[orreryv1.ForecastRequest]) (*connect.Response[orreryv1.ForecastResponse], error) {
	m := req.Msg
	from, to, err := rangeFromProto(m.GetFrom(), m.GetTo())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	top := int(m.GetTop())
	if top == 0 {
		top = 5
	}
	jobs, err := s.forecastJobs(ctx, m)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	if q := m.GetQueue(); q != "" {
		if err := dag.ValidateName(q); err != nil {
			return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "queue", Message: err.Error()})
		}
	}
	jobs = forecast.InQueue(jobs, m.GetQueue())
	res, err := forecast.Compute(jobs, from, to, top)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(ForecastToProto(res, len(jobs))), nil
}

// forecastJobs is what a forecast counts: the active stored jobs in scope
// that the caller may read, with the request's jobs in place of theirs.
func (s *pipelineServer) forecastJobs(ctx context.Context, m *orreryv1.ForecastRequest) ([]forecast.Job, error) {
	override := map[string]dag.Resource{}
	namespaces := map[string]bool{}
	for _, a := range m.GetJobs() {
		r := ResourceFromProto(a.GetMetadata(), a.GetSpec())
		r.Normalize()
		if es := dag.Validate(&r); len(es) > 0 {
			return nil, es
		}
		override[r.Metadata.Namespace+"/"+r.Metadata.Name] = r
		namespaces[r.Metadata.Namespace] = true
	}
	var out []forecast.Job
	f := job.ListFilter{Namespace: m.GetNamespace(), Status: job.StatusActive, WithSteps: true, PageSize: 500}
	for {
		page, next, err := s.jobs.List(ctx, actor(ctx), f)
		if err != nil {
			return nil, err
		}
		for _, j := range page {
			key := j.Namespace + "/" + j.Name
			if _, replaced := override[key]; replaced || (m.GetPrune() && namespaces[j.Namespace]) {
				continue
			}
			out = append(out, forecast.Job{Namespace: j.Namespace, Name: j.Name, Spec: j.Spec})
		}
		if len(out) > maxForecastJobs {
			return nil, &dag.FieldError{Field: "namespace", Message: fmt.Sprintf("more than %d jobs in scope: forecast one namespace at a time", maxForecastJobs)}
		}
		if next == "" {
			break
		}
		f.PageToken = next
	}
	for _, r := range override {
		if m.GetNamespace() == "" || r.Metadata.Namespace == m.GetNamespace() {
			out = append(out, forecast.Job{Namespace: r.Metadata.Namespace, Name: r.Metadata.Name, Spec: r.Spec})
		}
	}
	return out, nil
}

// ForecastToProto is a forecast as the API answers it.
func ForecastToProto(r *forecast.Result, jobs int) *orreryv1.ForecastResponse {
	out := &orreryv1.ForecastResponse{Runs: int32(r.Runs), TasksByQueue: counts(r.Tasks), Jobs: int32(jobs)}
	for _, m := range r.Minutes {
		out.Minutes = append(out.Minutes, &orreryv1.ForecastMinute{Minute: timestamppb.New(m.At), Runs: int32(m.Runs)})
	}
	for _, m := range r.Hottest {
		pm := &orreryv1.ForecastMinute{Minute: timestamppb.New(m.At), Runs: int32(m.Runs), TasksByQueue: counts(m.Tasks)}
		for _, j := range m.Jobs {
			pm.Jobs = append(pm.Jobs, &orreryv1.ForecastJob{Job: j.Job, Runs: int32(j.Runs)})
		}
		out.Hottest = append(out.Hottest, pm)
	}
	return out
}

func counts(m map[string]int) map[string]int32 {
	out := make(map[string]int32, len(m))
	for k, v := range m {
		out[k] = int32(v)
	}
	return out
}
