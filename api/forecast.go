package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"github.com/google/uuid"
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
	jobs, given, ids, err := s.forecastJobs(ctx, m)
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
	// The capacity forecast: each step's history (a job given in the
	// request has its stored namesake's), the tenant's profiles, the fleet.
	var asking []uuid.UUID // the history of jobs asking for resources only
	for i := range jobs {
		if id, ok := ids[jobs[i].Namespace+"/"+jobs[i].Name]; ok && forecast.AsksResources(&jobs[i]) {
			asking = append(asking, id)
		}
	}
	facts, err := s.jobs.ReadCapacityFacts(ctx, actor(ctx), asking)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	for i := range jobs {
		jobs[i].Lengths = facts.Lengths[ids[jobs[i].Namespace+"/"+jobs[i].Name]]
		jobs[i].Profiles = facts.Profiles
	}
	// A stored job names only profiles that exist; one given here may not.
	for i, r := range given {
		if es := job.MissingProfiles(&r.Spec, facts.Profiles); len(es) > 0 {
			e := *es[0]
			e.Field = fmt.Sprintf("jobs[%d].%s", i, e.Field)
			return nil, toConnect(ctx, s.log, &e)
		}
	}
	hours, unmeasured, err := forecast.Capacity(jobs, from, to, facts.Fleet)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := ForecastToProto(res, len(jobs))
	out.Hours, out.UnmeasuredSteps = HoursToProto(hours), int32(unmeasured)
	return connect.NewResponse(out), nil
}

// HoursToProto is a capacity forecast as the API answers it.
func HoursToProto(hours []forecast.Hour) []*orreryv1.ForecastHour {
	out := make([]*orreryv1.ForecastHour, len(hours))
	for i, h := range hours {
		ph := &orreryv1.ForecastHour{Queue: h.Queue, Hour: timestamppb.New(h.At), Demand: vectorToProto(h.Demand), Capacity: vectorToProto(h.Capacity),
			Served: h.Served, Unbounded: h.Unbounded, Short: h.Short, Load: h.Load}
		for _, j := range h.Jobs {
			ph.Jobs = append(ph.Jobs, &orreryv1.ForecastJobDemand{Job: j.Job, Demand: vectorToProto(j.Demand)})
		}
		out[i] = ph
	}
	return out
}

// forecastJobs is what a forecast counts: the active stored jobs in scope
// that the caller may read, with the request's jobs in place of theirs;
// the request's jobs as apply reads them, in its order; and the ids of
// the stored jobs by namespace/name.
func (s *pipelineServer) forecastJobs(ctx context.Context, m *orreryv1.ForecastRequest) ([]forecast.Job, []dag.Resource, map[string]uuid.UUID, error) {
	ids := map[string]uuid.UUID{}
	if ns := m.GetNamespace(); ns != "" {
		if err := dag.ValidateName(ns); err != nil {
			return nil, nil, nil, &dag.FieldError{Field: "namespace", Message: err.Error()}
		}
	}
	// The request's jobs as apply reads them: each error names its job
	// (jobs[2].spec...), and a job given twice is refused.
	items := make([]job.Item, len(m.GetJobs()))
	for i, a := range m.GetJobs() {
		items[i] = job.Item{Resource: ResourceFromProto(a.GetMetadata(), a.GetSpec())}
	}
	items, err := job.PrepareItems(items)
	if err != nil {
		return nil, nil, nil, err
	}
	given := make([]dag.Resource, len(items))
	override := map[string]bool{}
	namespaces := map[string]bool{}
	for i, it := range items {
		r := it.Resource
		given[i] = r
		override[r.Metadata.Namespace+"/"+r.Metadata.Name] = true
		namespaces[r.Metadata.Namespace] = true
	}
	var out []forecast.Job
	f := job.ListFilter{Namespace: m.GetNamespace(), Status: job.StatusActive, WithSteps: true, PageSize: 500}
	for {
		page, next, err := s.jobs.List(ctx, actor(ctx), f)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, j := range page {
			key := j.Namespace + "/" + j.Name
			ids[key] = j.ID
			if override[key] || (m.GetPrune() && namespaces[j.Namespace]) {
				continue
			}
			out = append(out, forecast.Job{Namespace: j.Namespace, Name: j.Name, Spec: j.Spec})
		}
		if len(out) > maxForecastJobs {
			return nil, nil, nil, &dag.FieldError{Field: "namespace", Message: fmt.Sprintf("more than %d jobs in scope: forecast one namespace at a time", maxForecastJobs)}
		}
		if next == "" {
			break
		}
		f.PageToken = next
	}
	for _, r := range given {
		if m.GetNamespace() == "" || r.Metadata.Namespace == m.GetNamespace() {
			out = append(out, forecast.Job{Namespace: r.Metadata.Namespace, Name: r.Metadata.Name, Spec: r.Spec})
		}
	}
	return out, given, ids, nil
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

// QueueDemand is one queue's capacity forecast as the CLI and the web UI
// show it: its hours with demand, its peak hour, and the short hours.
type QueueDemand struct {
	Queue string
	Hours int
	Peak  *orreryv1.ForecastHour
	Short []*orreryv1.ForecastHour
}

// DemandByQueue summarizes a capacity forecast (hours by queue then hour)
// per queue.
func DemandByQueue(hours []*orreryv1.ForecastHour) []QueueDemand {
	var out []QueueDemand
	for _, h := range hours {
		if len(out) == 0 || out[len(out)-1].Queue != h.GetQueue() {
			out = append(out, QueueDemand{Queue: h.GetQueue(), Peak: h})
		}
		q := &out[len(out)-1]
		q.Hours++
		// The peak: a short hour before one that is not (a resource no
		// worker has counts no load), then the highest load.
		if short, peak := len(h.GetShort()) > 0, len(q.Peak.GetShort()) > 0; short && !peak || short == peak && h.GetLoad() > q.Peak.GetLoad() {
			q.Peak = h
		}
		if len(h.GetShort()) > 0 {
			q.Short = append(q.Short, h)
		}
	}
	return out
}

// DemandText writes an hour's demand against its queue's capacity:
// "cpu 18/16, memory 32Gi/64Gi", or the demand alone where the capacity
// does not bound it.
func DemandText(h *orreryv1.ForecastHour) string {
	switch {
	case !h.GetServed():
		return ResourcesText(h.GetDemand()) + "; no live worker serves the queue"
	case h.GetUnbounded():
		return ResourcesText(h.GetDemand()) + "; a worker of the queue declares no capacity"
	}
	return ResourceUsage(h.GetCapacity(), h.GetDemand())
}
