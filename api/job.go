package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// jobServer implements orrery.v1.JobService over job.Service.
type jobServer struct {
	orreryv1connect.UnimplementedJobServiceHandler
	jobs *job.Service
	runs *run.Service // backfills
	log  *slog.Logger
}

// actor is who calls, as the authentication interceptor found: the engine
// scopes every query by its tenant and audits its name.
func actor(ctx context.Context) job.Actor { return principalOf(ctx).Actor() }

func refFromProto(field string, r *orreryv1.JobRef) (job.Ref, error) {
	if r.GetId() != "" {
		id, err := uuid.Parse(r.GetId())
		if err != nil || id == uuid.Nil {
			return job.Ref{}, &dag.FieldError{Field: field + ".id", Message: "not a UUID"}
		}
		return job.Ref{ID: id}, nil
	}
	if r.GetName() == "" {
		return job.Ref{}, &dag.FieldError{Field: field, Message: "give the job's id, or its namespace and name"}
	}
	for _, f := range []struct{ field, v string }{{field + ".name", r.GetName()}, {field + ".namespace", r.GetNamespace()}} {
		if err := plainText(f.field, f.v); err != nil {
			return job.Ref{}, err
		}
	}
	return job.Ref{Namespace: r.GetNamespace(), Name: r.GetName()}, nil
}

func (s *jobServer) CreateJob(ctx context.Context, req *connect.Request[orreryv1.CreateJobRequest]) (*connect.Response[orreryv1.CreateJobResponse], error) {
	m := req.Msg
	key, err := idempotencyKey(m.GetIdempotencyKey(), req.Header())
	if err != nil {
		return nil, err
	}
	j, err := s.jobs.Create(ctx, actor(ctx), ResourceFromProto(m.GetMetadata(), m.GetSpec()), key)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	resp := connect.NewResponse(&orreryv1.CreateJobResponse{Job: jobToProto(j)})
	resp.Header().Set("Location", RESTPrefix+"jobs/"+j.ID.String())
	setStatus(resp.Header(), http.StatusCreated)
	return resp, nil
}

// Upcoming fire times GetJob returns by default and at most.
const (
	defaultUpcoming = 10
	maxUpcoming     = 100
)

func (s *jobServer) GetJob(ctx context.Context, req *connect.Request[orreryv1.GetJobRequest]) (*connect.Response[orreryv1.GetJobResponse], error) {
	ref, err := refFromProto("ref", req.Msg.GetRef())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	n := int(req.Msg.GetUpcoming())
	switch {
	case n < 0 || n > maxUpcoming:
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "upcoming", Message: "outside 0..100"})
	case n == 0:
		n = defaultUpcoming
	}
	j, err := s.jobs.Get(ctx, actor(ctx), ref)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	rows, err := s.jobs.RecentHistory(ctx, actor(ctx), j.ID, int(req.Msg.GetHistory()))
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	up, down, err := s.jobs.Links(ctx, actor(ctx), j)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.GetJobResponse{Job: jobToProto(j), NextFireTimes: timesToProto(j.Upcoming(n))}
	for _, l := range up {
		out.Upstream = append(out.Upstream, &orreryv1.JobLink{Namespace: l.Namespace, Name: l.Name, On: l.On, Status: l.Status})
	}
	for _, l := range down {
		out.Downstream = append(out.Downstream, &orreryv1.JobLink{Namespace: l.Namespace, Name: l.Name, On: l.On, Status: l.Status})
	}
	calls, callers, err := s.jobs.Calls(ctx, actor(ctx), j)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	for _, l := range calls {
		out.Calls = append(out.Calls, &orreryv1.JobLink{Namespace: l.Namespace, Name: l.Name, Status: l.Status})
	}
	for _, l := range callers {
		out.Callers = append(out.Callers, &orreryv1.JobLink{Namespace: l.Namespace, Name: l.Name})
	}
	for _, r := range rows {
		out.History = append(out.History, auditEntryToProto(ctx, s.log, r.ID, r.At, r.Actor, r.Action, r.TargetKind, r.TargetID, r.TargetName, r.Before, r.After))
	}
	return connect.NewResponse(out), nil
}

// maxLabelFilters bounds the labels a list filters by.
const maxLabelFilters = 20

// labelFilter is the labels a job list filters by: the map's and label's
// (KEY:VALUE each; a key given twice must have one value).
func labelFilter(m map[string]string, label []string) (map[string]string, error) {
	if len(m)+len(label) > maxLabelFilters {
		field := "label" // the one the caller gave, or labels|label for both
		switch {
		case len(label) == 0:
			field = "labels"
		case len(m) > 0:
			field = "labels|label"
		}
		return nil, &dag.FieldError{Field: field, Message: fmt.Sprintf("%d labels; at most %d", len(m)+len(label), maxLabelFilters)}
	}
	out := make(map[string]string, len(m)+len(label))
	for k, v := range m {
		if strings.ContainsRune(k+v, 0) {
			return nil, &dag.FieldError{Field: "labels", Message: "contains a NUL character"}
		}
		out[k] = v
	}
	for i, l := range label {
		field := fmt.Sprintf("label[%d]", i)
		k, v, ok := strings.Cut(l, ":")
		switch {
		case !ok || k == "":
			return nil, &dag.FieldError{Field: field, Message: fmt.Sprintf("%q is not KEY:VALUE (team:data)", l)}
		case strings.ContainsRune(l, 0):
			return nil, &dag.FieldError{Field: field, Message: "contains a NUL character"}
		}
		if prev, dup := out[k]; dup && prev != v {
			return nil, &dag.FieldError{Field: field, Message: fmt.Sprintf("label %s is given as %q too; a job carries one value", k, prev)}
		}
		out[k] = v
	}
	return out, nil
}

func (s *jobServer) ListJobs(ctx context.Context, req *connect.Request[orreryv1.ListJobsRequest]) (*connect.Response[orreryv1.ListJobsResponse], error) {
	m := req.Msg
	if err := plainText("namespace", m.GetNamespace()); err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	labels, err := labelFilter(m.GetLabels(), m.GetLabel())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	status := StatusName(m.GetStatus())
	if status == "" && m.GetStatus() != orreryv1.JobStatus_JOB_STATUS_UNSPECIFIED {
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "status", Message: fmt.Sprintf("%d is not a job status", m.GetStatus())})
	}
	var full bool
	switch m.GetView() {
	case orreryv1.JobView_JOB_VIEW_UNSPECIFIED, orreryv1.JobView_JOB_VIEW_BASIC:
	case orreryv1.JobView_JOB_VIEW_FULL:
		full = true
	default:
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "view", Message: fmt.Sprintf("%d is not a job view", m.GetView())})
	}
	jobs, next, err := s.jobs.List(ctx, actor(ctx), job.ListFilter{
		Namespace: m.GetNamespace(), Status: status, Labels: labels, NameContains: m.GetNameContains(),
		PageSize: int(m.GetPageSize()), PageToken: m.GetPageToken(), WithSteps: full,
	})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ListJobsResponse{NextPageToken: next}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, jobToProto(j))
	}
	return connect.NewResponse(out), nil
}

func (s *jobServer) UpdateJob(ctx context.Context, req *connect.Request[orreryv1.UpdateJobRequest]) (*connect.Response[orreryv1.UpdateJobResponse], error) {
	m := req.Msg
	ref, err := refFromProto("ref", m.GetRef())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	// An omitted metadata or spec keeps the stored one (a REST PATCH of the
	// spec alone), read at a version the update then expects.
	meta, spec, version := m.GetMetadata(), m.GetSpec(), m.GetExpectedVersion()
	if meta == nil || spec == nil {
		cur, err := s.jobs.Get(ctx, actor(ctx), ref)
		if err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		stored := jobToProto(cur)
		if meta == nil {
			meta = stored.GetMetadata()
		}
		if spec == nil {
			spec = stored.GetSpec()
		}
		switch {
		case version == 0:
			version = stored.GetVersion()
		case version != stored.GetVersion():
			// What is filled in is the version read, not the one expected.
			return nil, toConnect(ctx, s.log, &job.VersionConflictError{Expected: version, Current: stored.GetVersion()})
		}
	}
	j, err := s.jobs.Update(ctx, actor(ctx), ref, ResourceFromProto(meta, spec), version)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.UpdateJobResponse{Job: jobToProto(j)}), nil
}

// statusCall runs one of pause, resume or delete.
func (s *jobServer) statusCall(ctx context.Context, r *orreryv1.JobRef, do func(context.Context, job.Actor, job.Ref) (*job.Job, error)) (*orreryv1.Job, error) {
	ref, err := refFromProto("ref", r)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	j, err := do(ctx, actor(ctx), ref)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return jobToProto(j), nil
}

func (s *jobServer) DeleteJob(ctx context.Context, req *connect.Request[orreryv1.DeleteJobRequest]) (*connect.Response[orreryv1.DeleteJobResponse], error) {
	j, err := s.statusCall(ctx, req.Msg.GetRef(), s.jobs.Delete)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orreryv1.DeleteJobResponse{Job: j}), nil
}

func (s *jobServer) PauseJob(ctx context.Context, req *connect.Request[orreryv1.PauseJobRequest]) (*connect.Response[orreryv1.PauseJobResponse], error) {
	j, err := s.statusCall(ctx, req.Msg.GetRef(), s.jobs.Pause)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orreryv1.PauseJobResponse{Job: j}), nil
}

func (s *jobServer) ResumeJob(ctx context.Context, req *connect.Request[orreryv1.ResumeJobRequest]) (*connect.Response[orreryv1.ResumeJobResponse], error) {
	j, err := s.statusCall(ctx, req.Msg.GetRef(), s.jobs.Resume)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&orreryv1.ResumeJobResponse{Job: j}), nil
}

// Preview sizes.
const (
	defaultPreview = 10
	maxPreview     = 1000
)

func (s *jobServer) PreviewSchedule(ctx context.Context, req *connect.Request[orreryv1.PreviewScheduleRequest]) (*connect.Response[orreryv1.PreviewScheduleResponse], error) {
	m := req.Msg
	n := int(m.GetCount())
	switch {
	case n < 0 || n > maxPreview:
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "count", Message: "outside 0..1000"})
	case n == 0:
		n = defaultPreview
	}
	sched, err := schedule.Validate(scheduleFromProto(m.GetSchedule()))
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	var from time.Time
	if m.GetFrom() != nil {
		if from, err = timeFromProto("from", m.GetFrom()); err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
	} else if from, err = s.jobs.Now(ctx); err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	ns := m.GetNamespace()
	if ns == "" {
		ns = dag.DefaultNamespace
	}
	out := &orreryv1.PreviewScheduleResponse{}
	for _, p := range sched.For(ns, m.GetName()).Plan(from, n) {
		pi := &orreryv1.PlannedInstant{Instant: timestamppb.New(p.Instant), Excluded: p.Excluded}
		if p.Excluded == "" {
			pi.FireTime = timestamppb.New(p.Fire)
			out.FireTimes = append(out.FireTimes, pi.Instant)
		}
		out.Instants = append(out.Instants, pi)
	}
	return connect.NewResponse(out), nil
}

// plainText refuses a lookup string the database cannot hold (NUL) or
// that no name can match (over 253 bytes), before it reaches a query.
func plainText(field, v string) error {
	switch {
	case strings.ContainsRune(v, 0):
		return &dag.FieldError{Field: field, Message: "contains a NUL character"}
	case len(v) > 253:
		return &dag.FieldError{Field: field, Message: "longer than any name (253 characters)"}
	}
	return nil
}

func (s *jobServer) Backfill(ctx context.Context, req *connect.Request[orreryv1.BackfillRequest]) (*connect.Response[orreryv1.BackfillResponse], error) {
	m := req.Msg
	ref, err := refFromProto("ref", m.GetRef())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	o := run.BackfillOptions{Redo: m.GetRedo(), MaxConcurrent: int(m.GetMaxConcurrent()), NewestFirst: m.GetNewestFirst(),
		DryRun: m.GetDryRun(), AllowLarge: m.GetAllowLarge()}
	if o.From, o.To, err = rangeFromProto(m.GetFrom(), m.GetTo()); err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	b, err := s.runs.Backfill(ctx, actor(ctx), ref, o)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.BackfillResponse{Total: b.Total, HaveRuns: int32(b.HaveRuns), Instants: timesToProto(b.Instants)}
	if !b.DryRunOnly {
		out.Backfill = backfillToProto(b.Backfill)
	}
	return connect.NewResponse(out), nil
}

func (s *jobServer) CancelBackfill(ctx context.Context, req *connect.Request[orreryv1.CancelBackfillRequest]) (*connect.Response[orreryv1.CancelBackfillResponse], error) {
	ref, err := refFromProto("ref", req.Msg.GetRef())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	id, err := uuid.Parse(req.Msg.GetId())
	if err != nil {
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "id", Message: "not a backfill id (a UUID)"})
	}
	b, err := s.runs.CancelBackfill(ctx, actor(ctx), ref, id)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.CancelBackfillResponse{Backfill: backfillToProto(b.Backfill)}), nil
}

func (s *jobServer) ListBackfills(ctx context.Context, req *connect.Request[orreryv1.ListBackfillsRequest]) (*connect.Response[orreryv1.ListBackfillsResponse], error) {
	ref, err := refFromProto("ref", req.Msg.GetRef())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	bs, err := s.runs.ListBackfills(ctx, actor(ctx), ref)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ListBackfillsResponse{}
	for _, b := range bs {
		out.Backfills = append(out.Backfills, backfillToProto(b.Backfill))
	}
	return connect.NewResponse(out), nil
}

func backfillToProto(b store.Backfill) *orreryv1.JobBackfill {
	return &orreryv1.JobBackfill{Id: b.ID.String(), JobId: b.JobID.String(), From: timestamppb.New(b.FromAt), To: timestamppb.New(b.ToAt),
		Redo: b.Redo, MaxConcurrent: b.MaxConcurrent, NewestFirst: b.NewestFirst, Status: b.Status, Reason: b.Reason,
		Total: b.Total, Created: b.Created, Existing: b.Existing, Retried: b.Retried, Cursor: timeToProto(b.CursorAt),
		CreateTime: timestamppb.New(b.CreatedAt), CreatedBy: b.CreatedBy, FinishTime: timeToProto(b.FinishedAt)}
}
