package api

import (
	"context"
	"log/slog"

	"connectrpc.com/connect"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/internal/job"
)

// pipelineServer implements orrery.v1.PipelineService over job.Service.
type pipelineServer struct {
	orreryv1connect.UnimplementedPipelineServiceHandler
	jobs *job.Service
	log  *slog.Logger
}

func itemsFromProto(in []*orreryv1.AppliedJob) []job.Item {
	items := make([]job.Item, len(in))
	for i, a := range in {
		items[i] = job.Item{Resource: ResourceFromProto(a.GetMetadata(), a.GetSpec())}
		if src := a.GetSource(); src != nil && src.GetPath() != "" {
			items[i].Source = &job.Source{Path: src.GetPath(), Commit: src.GetCommit()}
		}
	}
	return items
}

func changesToProto(cs []job.Change) []*orreryv1.Change {
	out := make([]*orreryv1.Change, len(cs))
	for i, c := range cs {
		out[i] = &orreryv1.Change{Action: c.Action, Namespace: c.Namespace, Name: c.Name, Fields: c.Fields}
		if c.Job != nil {
			out[i].Job = jobToProto(c.Job)
		}
	}
	return out
}

func (s *pipelineServer) Plan(ctx context.Context, req *connect.Request[orreryv1.PlanRequest]) (*connect.Response[orreryv1.PlanResponse], error) {
	m := req.Msg
	cs, err := s.jobs.Plan(ctx, actor(ctx), itemsFromProto(m.GetJobs()), job.PlanOptions{Prune: m.GetPrune(), Namespaces: m.GetNamespaces()})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.PlanResponse{Changes: changesToProto(cs)}), nil
}

func (s *pipelineServer) Apply(ctx context.Context, req *connect.Request[orreryv1.ApplyRequest]) (*connect.Response[orreryv1.ApplyResponse], error) {
	m := req.Msg
	cs, err := s.jobs.ApplyAll(ctx, actor(ctx), itemsFromProto(m.GetJobs()), job.PlanOptions{Prune: m.GetPrune(), Namespaces: m.GetNamespaces()})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.ApplyResponse{Changes: changesToProto(cs)}), nil
}
