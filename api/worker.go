package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/gateway"
	"github.com/orrery-dev/orrery/internal/run"
)

// The bounds of what a remote worker sends (docs/remote-workers.md).
const (
	maxClaimTasks     = 100
	maxClaimWait      = 30 * time.Second
	defaultClaimWait  = 20 * time.Second
	minLease          = 5 * time.Second
	maxLease          = 300 * time.Second
	defaultLease      = 30 * time.Second
	maxWorkerSlots    = 10_000
	maxHeldAttempts   = 1000
	maxReportEnds     = 500
	maxReportError    = 8 << 10
	claimsPerSecond   = 50 // per key; a burst of as many
	maxWorkerNameLen  = 200
	remoteWorkerSpace = "orrery-remote-worker"
)

// workerServer implements orrery.v1.WorkerService over a Gateway.
type workerServer struct {
	orreryv1connect.UnimplementedWorkerServiceHandler
	gw     *gateway.Gateway
	log    *slog.Logger
	claims *keyRate
}

// remoteWorker is the worker a call names, as its key may serve it. Its
// row is one per key and name; its name on attempts carries the key's
// prefix, so that no other key's worker can report for it.
func remoteWorker(p access.Principal, name string) (run.RemoteWorker, error) {
	if name == "" || len(name) > maxWorkerNameLen || !dag.IsText(name) || strings.ContainsAny(name, "()\n\r\t") {
		return run.RemoteWorker{}, &dag.FieldError{Field: "worker", Message: "1 to 200 characters of text, without parentheses or control characters"}
	}
	shown, scope := name, p.KeyID.String()
	if p.KeyPrefix != "" {
		shown = name + " (" + p.KeyPrefix + ")"
	}
	id := uuid.NewSHA1(uuid.NameSpaceOID, []byte(remoteWorkerSpace+"/"+p.Tenant.String()+"/"+scope+"/"+name))
	return run.RemoteWorker{ID: id, Name: shown, Tenant: p.Tenant, Key: p.KeyID}, nil
}

// seconds reads an optional duration field in whole seconds.
func seconds(field string, v int32, def, lo, hi time.Duration) (time.Duration, error) {
	if v == 0 && def > 0 {
		return def, nil
	}
	d := time.Duration(v) * time.Second
	if d < lo || d > hi {
		return 0, &dag.FieldError{Field: field, Message: fmt.Sprintf("%d: want %d to %d", v, int(lo.Seconds()), int(hi.Seconds()))}
	}
	return d, nil
}

// names checks a list of names (types, queues, namespaces).
func names(field string, list []string, allowed func(string) bool) error {
	if len(list) > access.MaxWorkerScope {
		return &dag.FieldError{Field: field, Message: fmt.Sprintf("%d names; at most %d", len(list), access.MaxWorkerScope)}
	}
	for i, n := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := dag.ValidateName(n); err != nil {
			return &dag.FieldError{Field: f, Message: err.Error()}
		}
		if allowed != nil && !allowed(n) {
			return &dag.FieldError{Field: f, Message: fmt.Sprintf("%q is not within this worker key's scope", n)}
		}
	}
	return nil
}

// Claim implements WorkerService.Claim.
func (s *workerServer) Claim(ctx context.Context, req *connect.Request[orreryv1.ClaimRequest]) (*connect.Response[orreryv1.ClaimResponse], error) {
	p, m := principalOf(ctx), req.Msg
	w, err := remoteWorker(p, m.GetWorker())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	max, wait, lease, err := claimBounds(m)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	w.Types, w.Namespaces = slices.Clone(m.GetTypes()), slices.Clone(m.GetNamespaces())
	queues := m.GetQueues()
	if len(queues) == 0 {
		queues = []string{dag.DefaultQueue}
	}
	switch {
	case len(w.Types) == 0:
		err = &dag.FieldError{Field: "types", Message: "name at least one type (the steps' run: {worker: TYPE})"}
	default:
		err = errors.Join(names("types", w.Types, p.Worker.AllowsType), names("queues", queues, nil),
			names("namespaces", w.Namespaces, p.Worker.AllowsNamespace))
	}
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	if len(w.Namespaces) == 0 {
		w.Namespaces = p.Worker.Namespaces
	}
	if c := m.GetCapacity(); c != nil {
		v, err := resourcesFromProto(c).Vector()
		if err != nil {
			return nil, toConnect(ctx, s.log, resourceFieldError("capacity", err))
		}
		w.Capacity = &v
	}
	slots := int(m.GetSlots())
	if slots == 0 {
		slots = max
	}
	if slots < 1 || slots > maxWorkerSlots {
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "slots", Message: fmt.Sprintf("%d: want 1 to %d", slots, maxWorkerSlots)})
	}
	w.Queues = make(map[string]int, len(queues))
	for _, q := range queues {
		w.Queues[q] = slots
	}
	if err := s.claims.take(p.KeyID, time.Now()); err != nil {
		return nil, err
	}
	atts, err := s.gw.Claim(ctx, w, max, wait, lease)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ClaimResponse{}
	for _, a := range atts {
		out.Tasks = append(out.Tasks, remoteTaskToProto(a, lease))
	}
	return connect.NewResponse(out), nil
}

// claimBounds reads a claim's max_tasks, wait_seconds and lease_seconds.
func claimBounds(m *orreryv1.ClaimRequest) (int, time.Duration, time.Duration, error) {
	max := int(m.GetMaxTasks())
	if max == 0 {
		max = 1
	}
	if max < 1 || max > maxClaimTasks {
		return 0, 0, 0, &dag.FieldError{Field: "max_tasks", Message: fmt.Sprintf("%d: want 1 to %d", max, maxClaimTasks)}
	}
	wait := defaultClaimWait
	if m.WaitSeconds != nil {
		var err error
		if wait, err = seconds("wait_seconds", m.GetWaitSeconds(), 0, 0, maxClaimWait); err != nil {
			return 0, 0, 0, err
		}
	}
	lease, err := seconds("lease_seconds", m.GetLeaseSeconds(), defaultLease, minLease, maxLease)
	return max, wait, lease, err
}

func remoteTaskToProto(a *run.Attempt, lease time.Duration) *orreryv1.RemoteTask {
	c := a.Call
	params := "{}"
	if len(a.Params) > 0 {
		params = string(a.Params)
	}
	payload := "null"
	if len(c.Payload) > 0 {
		payload = string(c.Payload)
	}
	return &orreryv1.RemoteTask{
		AttemptId: a.ID.String(), TaskId: c.TaskID.String(), FencingToken: c.FencingToken,
		LeaseExpiresAt: timestamppb.New(a.StartedAt.Add(min(lease, a.Timeout))), Deadline: timestamppb.New(a.StartedAt.Add(a.Timeout)),
		RunId: c.RunID.String(), Namespace: c.Namespace, Job: c.Job, Step: c.Step, Attempt: int32(c.Attempt),
		ScheduledFor: timestamppb.New(c.ScheduledFor), Trigger: c.Trigger, Type: c.Executor.Worker,
		ParamsJson: params, PayloadJson: payload, IdempotencyKey: c.IdempotencyKey(),
	}
}

// Heartbeat implements WorkerService.Heartbeat.
func (s *workerServer) Heartbeat(ctx context.Context, req *connect.Request[orreryv1.HeartbeatRequest]) (*connect.Response[orreryv1.HeartbeatResponse], error) {
	p, m := principalOf(ctx), req.Msg
	w, err := remoteWorker(p, m.GetWorker())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	lease, err := seconds("lease_seconds", m.GetLeaseSeconds(), defaultLease, minLease, maxLease)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	if len(m.GetAttempts()) > maxHeldAttempts {
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "attempts", Message: fmt.Sprintf("%d attempts; at most %d a heartbeat", len(m.GetAttempts()), maxHeldAttempts)})
	}
	held := make([]run.Held, 0, len(m.GetAttempts()))
	seen := make(map[uuid.UUID]bool, len(m.GetAttempts()))
	for i, h := range m.GetAttempts() {
		id, err := uuid.Parse(h.GetTaskId())
		if err != nil {
			return nil, toConnect(ctx, s.log, &dag.FieldError{Field: fmt.Sprintf("attempts[%d].task_id", i), Message: "not a task id"})
		}
		if !seen[id] {
			seen[id] = true
			held = append(held, run.Held{TaskID: id, FencingToken: h.GetFencingToken()})
		}
	}
	stop, err := s.gw.Heartbeat(ctx, w, held, lease)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.HeartbeatResponse{}
	for _, h := range held {
		if why, ok := stop[h.TaskID]; ok {
			out.Stop = append(out.Stop, &orreryv1.StopAttempt{TaskId: h.TaskID.String(), Reason: why})
		}
	}
	return connect.NewResponse(out), nil
}

// reportReasons are the exit reasons a remote worker may give a failure.
var reportReasons = []string{executor.ReasonError, executor.ReasonTimeout, executor.ReasonCancelled}

// Report implements WorkerService.Report: one attempt's end, or several
// (ends) in one transaction.
func (s *workerServer) Report(ctx context.Context, req *connect.Request[orreryv1.ReportRequest]) (*connect.Response[orreryv1.ReportResponse], error) {
	p, m := principalOf(ctx), req.Msg
	w, err := remoteWorker(p, m.GetWorker())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	ends := m.GetEnds()
	if len(ends) == 0 { // one end, in the request's own fields
		ends = []*orreryv1.AttemptEnd{{TaskId: m.GetTaskId(), FencingToken: m.GetFencingToken(), Success: m.GetSuccess(), Output: m.GetOutput(),
			Error: m.GetError(), ExitReason: m.GetExitReason(), Retryable: m.GetRetryable()}}
	} else if m.GetTaskId() != "" || m.GetFencingToken() != 0 || m.GetSuccess() || m.GetOutput() != "" || m.GetError() != "" || m.GetExitReason() != "" || m.GetRetryable() {
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "ends", Message: "given with task_id, fencing_token or a result: a report gives one end in its own fields, or several in ends"})
	}
	if len(ends) > maxReportEnds {
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "ends", Message: fmt.Sprintf("%d ends; at most %d a report", len(ends), maxReportEnds)})
	}
	reports := make([]run.Report, len(ends))
	type attempt struct {
		task  uuid.UUID
		token int64
	}
	seen := make(map[attempt]int, len(ends))
	for i, e := range ends {
		field := ""
		if len(m.GetEnds()) > 0 {
			field = fmt.Sprintf("ends[%d].", i)
		}
		r, err := reportOf(field, e)
		if err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		if first, ok := seen[attempt{r.TaskID, r.FencingToken}]; ok {
			return nil, toConnect(ctx, s.log, &dag.FieldError{Field: field + "task_id", Message: fmt.Sprintf("the attempt of ends[%d] again: a report ends an attempt once", first)})
		}
		seen[attempt{r.TaskID, r.FencingToken}] = i
		reports[i] = r
	}
	accepted, err := s.gw.Report(ctx, w, reports)
	if nh := (*run.NotHeldError)(nil); errors.As(err, &nh) && len(m.GetEnds()) > 0 {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("ends[%d]: %w", nh.Index, err))
	}
	if errors.Is(err, run.ErrNotHeld) {
		return nil, connect.NewError(connect.CodeNotFound, err)
	}
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ReportResponse{Accepted: !slices.Contains(accepted, false)}
	if len(m.GetEnds()) > 0 {
		out.AcceptedEnds = accepted
	}
	return connect.NewResponse(out), nil
}

// reportOf is the report of one attempt's end, its fields checked (field
// prefixes their names: "ends[3]." in a report of several).
func reportOf(field string, e *orreryv1.AttemptEnd) (run.Report, error) {
	id, err := uuid.Parse(e.GetTaskId())
	if err != nil {
		return run.Report{}, &dag.FieldError{Field: field + "task_id", Message: "not a task id"}
	}
	res := executor.Result{OK: e.GetSuccess(), Output: e.GetOutput()}
	switch {
	case !dag.IsText(e.GetOutput()):
		err = &dag.FieldError{Field: field + "output", Message: "must be UTF-8 text without NUL characters"}
	case len(e.GetError()) > maxReportError || !dag.IsText(e.GetError()):
		err = &dag.FieldError{Field: field + "error", Message: fmt.Sprintf("at most %d bytes of UTF-8 text", maxReportError)}
	case e.GetSuccess() && (e.GetError() != "" || e.GetExitReason() != "" || e.GetRetryable()):
		err = &dag.FieldError{Field: field + "success", Message: "a success has no error, exit_reason or retryable"}
	case !e.GetSuccess() && e.GetExitReason() != "" && !slices.Contains(reportReasons, e.GetExitReason()):
		err = &dag.FieldError{Field: field + "exit_reason", Message: fmt.Sprintf("%q: want %s", e.GetExitReason(), strings.Join(reportReasons, ", "))}
	}
	if err != nil {
		return run.Report{}, err
	}
	if !res.OK {
		res.ExitReason, res.Error, res.Retryable, res.FailureClass = e.GetExitReason(), e.GetError(), e.GetRetryable(), executor.ClassUser
		if res.ExitReason == "" {
			res.ExitReason = executor.ReasonError
		}
		if res.Error == "" {
			res.Error = "the remote worker reported a failure without an error"
		}
	}
	// An output past 64 KiB is cut and marked, as a local one.
	return run.Report{TaskID: id, FencingToken: e.GetFencingToken(), Result: res.Storable()}, nil
}
