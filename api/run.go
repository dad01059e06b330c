package api

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/run"
)

// runServer implements orrery.v1.RunService over run.Service.
type runServer struct {
	orreryv1connect.UnimplementedRunServiceHandler
	runs *run.Service
	log  *slog.Logger
}

func parseID(field, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, &dag.FieldError{Field: field, Message: "not a UUID"}
	}
	return id, nil
}

// optionalRef is a job filter: empty when the request names no job.
func optionalRef(field string, r *orreryv1.JobRef) (job.Ref, error) {
	if r == nil || (r.GetId() == "" && r.GetName() == "") {
		return job.Ref{}, nil
	}
	return refFromProto(field, r)
}

func (s *runServer) ListRuns(ctx context.Context, req *connect.Request[orreryv1.ListRunsRequest]) (*connect.Response[orreryv1.ListRunsResponse], error) {
	m := req.Msg
	ref, err := optionalRef("job", m.GetJob())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	if err := plainText("namespace", m.GetNamespace()); err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	f := run.ListFilter{Job: ref, Namespace: m.GetNamespace(), Trigger: m.GetTrigger(), Status: strings.ToLower(m.GetStatus()), PageSize: int(m.GetPageSize()), PageToken: m.GetPageToken(),
		WithSteps: m.GetWithSteps()}
	if m.GetSince() != nil {
		t, err := timeFromProto("since", m.GetSince())
		if err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		f.Since = &t
	}
	if m.GetUntil() != nil {
		t, err := timeFromProto("until", m.GetUntil())
		if err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		f.Until = &t
	}
	runs, next, err := s.runs.List(ctx, actor(ctx), f)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ListRunsResponse{NextPageToken: next}
	for _, r := range runs {
		out.Runs = append(out.Runs, runToProto(r))
	}
	return connect.NewResponse(out), nil
}

func (s *runServer) GetRun(ctx context.Context, req *connect.Request[orreryv1.GetRunRequest]) (*connect.Response[orreryv1.GetRunResponse], error) {
	id, err := parseID("id", req.Msg.GetId())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	if err := plainText("items_of", req.Msg.GetItemsOf()); err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	d, err := s.runs.Get(ctx, actor(ctx), id, run.ItemsPage{Of: req.Msg.GetItemsOf(), From: int(req.Msg.GetItemsFrom())})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.GetRunResponse{Run: runToProto(d.Run)}
	stepOf := make(map[uuid.UUID]string, len(d.Tasks))
	for _, t := range d.Tasks {
		stepOf[t.ID] = t.Step
	}
	for _, t := range d.Tasks {
		pt := taskToProto(t)
		for _, p := range t.Parents {
			pt.Needs = append(pt.Needs, stepOf[p])
		}
		out.Tasks = append(out.Tasks, pt)
	}
	for _, t := range d.Items {
		out.Items = append(out.Items, taskToProto(t))
	}
	return connect.NewResponse(out), nil
}

// taskToProto is a task of a run, with its attempts (not its needs).
func taskToProto(t run.Task) *orreryv1.Task {
	{
		pt := &orreryv1.Task{
			Id: t.ID.String(), Step: t.Step, Status: string(t.Status), ParentsRemaining: t.ParentsRemaining, Queue: dispatch.RemoteBase(t.Queue),
			Priority: t.Priority, Attempt: t.Attempt, FencingToken: t.FencingToken, LastError: t.LastError,
			ReleaseTime: timeToProto(t.ReleasedAt), StartTime: timeToProto(t.StartedAt), FinishTime: timeToProto(t.FinishedAt),
			WaitReason: t.WaitReason, ReadyTime: timeToProto(t.ReadyAt), AdmitTime: timeToProto(t.AdmittedAt),
			ConcurrencyKeys: t.FlowKeys,
		}
		if t.RateKey != nil {
			pt.RateKey = *t.RateKey
		}
		for _, a := range t.Attempts {
			pt.Attempts = append(pt.Attempts, &orreryv1.Attempt{
				Number: a.Number, Worker: a.Worker, FencingToken: a.FencingToken, StartTime: timestamppb.New(a.StartedAt),
				FinishTime: timeToProto(a.FinishedAt), Outcome: string(a.Outcome), ExitReason: a.ExitReason, FailureClass: a.FailureClass,
				Error: a.Error, Output: a.Output, OutputTruncated: a.OutputTruncated, Log: a.Log, LateOutcome: a.LateOutcome, LateError: a.LateError,
			})
		}
		if t.ItemIndex.Valid {
			pt.ItemIndex = &t.ItemIndex.Int32
		}
		if t.ChildRunID != nil {
			pt.ChildRunId = t.ChildRunID.String()
		}
		if v := t.Resources(); !v.IsZero() {
			pt.Resources = vectorToProto(v)
		}
		if c := t.Items; c != nil {
			pt.Items = &orreryv1.ItemCounts{Total: int32(c.Total), Needed: int32(c.Needed), ByStatus: map[string]int32{}}
			for st, n := range c.ByStatus {
				pt.Items.ByStatus[string(st)] = int32(n)
			}
		}
		if a := t.Approval; a != nil {
			pt.Approval = pendingApprovalToProto(a)
		}
		return pt
	}
}

func (s *runServer) TriggerJob(ctx context.Context, req *connect.Request[orreryv1.TriggerJobRequest]) (*connect.Response[orreryv1.TriggerJobResponse], error) {
	m := req.Msg
	ref, err := refFromProto("job", m.GetJob())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	key, err := idempotencyKey(m.GetIdempotencyKey(), req.Header())
	if err != nil {
		return nil, err
	}
	o := run.TriggerOptions{IdempotencyKey: key, IgnoreOverlap: m.GetIgnoreOverlap(), ParamTexts: m.GetParamTexts()}
	if len(m.GetParams()) > 0 {
		o.Params = make(map[string]dag.Payload, len(m.GetParams()))
		for k, v := range m.GetParams() {
			o.Params[k] = payloadFromProto(v)
		}
	}
	r, err := s.runs.TriggerWith(ctx, actor(ctx), ref, o)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.TriggerJobResponse{Run: runToProto(*r)}), nil
}

func (s *runServer) RetryRun(ctx context.Context, req *connect.Request[orreryv1.RetryRunRequest]) (*connect.Response[orreryv1.RetryRunResponse], error) {
	id, err := parseID("id", req.Msg.GetId())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	r, err := s.runs.RetryRun(ctx, actor(ctx), id, req.Msg.GetIgnoreOverlap())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.RetryRunResponse{Run: runToProto(*r)}), nil
}

func (s *runServer) CancelRun(ctx context.Context, req *connect.Request[orreryv1.CancelRunRequest]) (*connect.Response[orreryv1.CancelRunResponse], error) {
	id, err := parseID("id", req.Msg.GetId())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	r, err := s.runs.CancelRun(ctx, actor(ctx), id, req.Msg.GetReason())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.CancelRunResponse{Run: runToProto(*r)}), nil
}

func pendingApprovalToProto(a *run.PendingApproval) *orreryv1.PendingApproval {
	out := &orreryv1.PendingApproval{Message: a.Message, Role: a.Ask.DecidedBy(), Principals: a.Ask.Principals, Count: int32(a.Ask.Approvers()),
		Separate: a.Ask.Separate, TimeoutTime: timestamppb.New(a.TimeoutAt), OnTimeout: string(a.Ask.OnTimeout), TriggeredBy: a.TriggeredBy}
	if out.OnTimeout == "" {
		out.OnTimeout = string(dag.TimeoutFails)
	}
	for _, d := range a.Decisions {
		out.Decisions = append(out.Decisions, &orreryv1.Decision{Principal: d.Principal, Decision: d.Decision, Comment: d.Comment, Time: timestamppb.New(d.DecidedAt)})
	}
	return out
}

func (s *runServer) ApproveStep(ctx context.Context, req *connect.Request[orreryv1.ApproveStepRequest]) (*connect.Response[orreryv1.ApproveStepResponse], error) {
	m := req.Msg
	t, err := s.decide(ctx, m.GetId(), m.GetStep(), m.GetComment(), true)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orreryv1.ApproveStepResponse{Task: t}), nil
}

func (s *runServer) RejectStep(ctx context.Context, req *connect.Request[orreryv1.RejectStepRequest]) (*connect.Response[orreryv1.RejectStepResponse], error) {
	m := req.Msg
	t, err := s.decide(ctx, m.GetId(), m.GetStep(), m.GetComment(), false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orreryv1.RejectStepResponse{Task: t}), nil
}

// decide approves or rejects a step (run.Service.Decide) and answers its
// task as the decision left it.
func (s *runServer) decide(ctx context.Context, runID, step, comment string, approve bool) (*orreryv1.Task, error) {
	id, err := parseID("id", runID)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	t, err := s.runs.Decide(ctx, actor(ctx), run.Decision{Run: id, Step: step, Approve: approve, Comment: comment})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return taskToProto(*t), nil
}

func (s *runServer) ListDeadLetters(ctx context.Context, req *connect.Request[orreryv1.ListDeadLettersRequest]) (*connect.Response[orreryv1.ListDeadLettersResponse], error) {
	m := req.Msg
	ref, err := optionalRef("job", m.GetJob())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	rows, next, err := s.runs.ListDeadLetters(ctx, actor(ctx), ref, int(m.GetPageSize()), m.GetPageToken())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ListDeadLettersResponse{NextPageToken: next}
	for _, d := range rows {
		out.DeadLetters = append(out.DeadLetters, &orreryv1.DeadLetter{
			TaskId: d.ID.String(), RunId: d.RunID.String(), JobId: d.JobID.String(), Namespace: d.Namespace, Job: d.JobName,
			Step: d.Step, Attempts: d.Attempt, Queue: dispatch.RemoteBase(d.Queue), LastError: d.LastError,
			ScheduledTime: timestamppb.New(d.ScheduledFor), DeadLetterTime: timeToProto(d.FinishedAt),
		})
	}
	return connect.NewResponse(out), nil
}

func (s *runServer) ReplayDeadLetters(ctx context.Context, req *connect.Request[orreryv1.ReplayDeadLettersRequest]) (*connect.Response[orreryv1.ReplayDeadLettersResponse], error) {
	m := req.Msg
	ids := make([]uuid.UUID, 0, len(m.GetTaskIds()))
	for _, s := range m.GetTaskIds() {
		id, err := parseID("task_ids", s)
		if err != nil {
			return nil, toConnect(ctx, nil, err)
		}
		ids = append(ids, id)
	}
	ref, err := optionalRef("job", m.GetJob())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	replayed, err := s.runs.ReplayDeadLetters(ctx, actor(ctx), ids, ref, int(m.GetLimit()))
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ReplayDeadLettersResponse{}
	for _, id := range replayed {
		out.TaskIds = append(out.TaskIds, id.String())
	}
	return connect.NewResponse(out), nil
}

func runToProto(r run.Run) *orreryv1.Run {
	var params *structpb.Struct
	if len(r.Params) > 0 {
		params = new(structpb.Struct)
		if err := protojson.Unmarshal(r.Params, params); err != nil {
			params = nil // written by RunParams: a JSON object
		}
	}
	var upstream *structpb.Struct
	if len(r.Upstream) > 0 {
		upstream = new(structpb.Struct)
		if err := protojson.Unmarshal(r.Upstream, upstream); err != nil {
			upstream = nil // written by the scheduler: a JSON object
		}
	}
	var event *structpb.Struct
	if len(r.Event) > 0 {
		event = new(structpb.Struct)
		if err := protojson.Unmarshal(r.Event, event); err != nil {
			event = nil // written by the scheduler: a JSON object
		}
	}
	out := &orreryv1.Run{
		Id: r.ID.String(), JobId: r.JobID.String(), Namespace: r.Namespace, Job: r.Job, JobVersion: r.JobVersion,
		Shard: int32(r.Shard), ScheduledTime: timestamppb.New(r.ScheduledFor), Trigger: string(r.Trigger), Status: string(r.Status),
		Reason: r.Reason, CreateTime: timestamppb.New(r.CreatedAt), StartTime: timeToProto(r.StartedAt), FinishTime: timeToProto(r.FinishedAt),
		Params: params, Upstream: upstream, FirstError: r.FirstError, Steps: stepsToProto(r.Steps),
		ParentStep: r.ParentStep, Event: event, TriggeredBy: r.TriggeredBy, ConcurrencyKeys: r.ConcurrencyKeys,
	}
	if r.ParentRun != nil {
		out.ParentRunId = r.ParentRun.String()
	}
	out.DebounceKey, out.DebounceTime, out.DebounceCount = r.DebounceKey, timeToProto(r.DebounceAt), int32(r.DebounceCount)
	return out
}

// stepsToProto lists a run's steps' statuses by step name.
func stepsToProto(steps map[string]string) []*orreryv1.RunStep {
	names := make([]string, 0, len(steps))
	for n := range steps {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]*orreryv1.RunStep, len(names))
	for i, n := range names {
		out[i] = &orreryv1.RunStep{Step: n, Status: steps[n]}
	}
	return out
}

func (s *runServer) SummarizeRuns(ctx context.Context, req *connect.Request[orreryv1.SummarizeRunsRequest]) (*connect.Response[orreryv1.SummarizeRunsResponse], error) {
	m := req.Msg
	if err := plainText("namespace", m.GetNamespace()); err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	f := run.SummaryFilter{Namespace: m.GetNamespace()}
	if m.GetSince() != nil {
		t, err := timeFromProto("since", m.GetSince())
		if err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		f.Since = t
	}
	if m.GetUntil() != nil {
		t, err := timeFromProto("until", m.GetUntil())
		if err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		f.Until = t
	}
	sum, err := s.runs.Summarize(ctx, actor(ctx), f)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.SummarizeRunsResponse{Since: timestamppb.New(sum.Since), Until: timestamppb.New(sum.Until)}
	for _, h := range sum.Hours {
		by := make(map[string]int32, len(h.ByStatus))
		for k, v := range h.ByStatus {
			by[k] = int32(v)
		}
		out.Hours = append(out.Hours, &orreryv1.RunHour{StartTime: timestamppb.New(h.Start), ByStatus: by})
	}
	for _, j := range sum.FailingJobs {
		out.FailingJobs = append(out.FailingJobs, &orreryv1.FailingJob{Namespace: j.Namespace, Job: j.Job, Failures: int32(j.Failures), LastFailureTime: timestamppb.New(j.LastFailure)})
	}
	for _, r := range sum.SlowestStarts {
		out.SlowestStarts = append(out.SlowestStarts, &orreryv1.SlowStart{RunId: r.RunID.String(), Namespace: r.Namespace, Job: r.Job,
			ScheduledTime: timestamppb.New(r.Scheduled), StartTime: timestamppb.New(r.Started)})
	}
	for _, j := range sum.LateJobs {
		out.LateJobs = append(out.LateJobs, &orreryv1.LateJob{Namespace: j.Namespace, Job: j.Job, NextFireTime: timestamppb.New(j.NextFire)})
	}
	return connect.NewResponse(out), nil
}
