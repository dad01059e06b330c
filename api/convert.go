package api

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/expr"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
)

// ResourceFromProto turns API messages into the YAML resource the engine
// validates. It never fails: validation reports bad values by field.
func ResourceFromProto(md *orreryv1.JobMetadata, spec *orreryv1.JobSpec) dag.Resource {
	r := dag.Resource{APIVersion: dag.APIVersion, Kind: dag.KindJob}
	if md != nil {
		r.Metadata = dag.Metadata{Name: md.GetName(), Namespace: md.GetNamespace(), Description: md.GetDescription(), Labels: md.GetLabels()}
	}
	if spec == nil {
		return r
	}
	r.Spec = dag.JobSpec{
		Schedule:    scheduleFromProto(spec.GetSchedule()),
		Misfire:     dag.MisfirePolicy(spec.GetMisfire()),
		MaxBackfill: int(spec.GetMaxBackfill()),
		Overlap:     dag.OverlapPolicy(spec.GetOverlap()),
		Payload:     payloadFromProto(spec.GetPayload()),

		PauseAfterFailures: int(spec.GetPauseAfterFailures()),
	}
	r.Spec.Concurrency = limitsFromProto(spec.GetConcurrency())
	if d := spec.GetDebounce(); d != nil {
		r.Spec.Debounce = &dag.Debounce{Key: d.GetKey(), Period: dag.Duration{Duration: d.GetPeriod().AsDuration()}}
		if d.GetMaxWait() != nil {
			r.Spec.Debounce.MaxWait = dag.Duration{Duration: d.GetMaxWait().AsDuration()}
		}
	}
	if d := spec.GetDefaults(); d != nil {
		r.Spec.Defaults = dag.StepDefaults{Queue: d.GetQueue(), Priority: d.GetPriority(), Timeout: durationFromProto(d.GetTimeout()), Retry: retryFromProto(d.GetRetry()),
			Resources: resourcesFromProto(d.GetResources()), ResourceProfile: d.GetResourceProfile()}
	}
	if spec.GetRun() != nil {
		e := executorFromProto(spec.GetRun())
		r.Spec.Run = &e
	}
	if a := spec.GetAlerts(); a != nil {
		r.Spec.Alerts = &dag.Alerts{StartWithin: durationFromProto(a.GetStartWithin()), FinishWithin: durationFromProto(a.GetFinishWithin()), On: a.GetOn()}
		for _, n := range a.GetNotify() {
			var w *dag.Webhook
			if n.GetWebhook() != nil {
				v := webhookFromProto(n.GetWebhook())
				w = &v
			}
			r.Spec.Alerts.Notify = append(r.Spec.Alerts.Notify, dag.Notify{Webhook: w})
		}
	}
	for _, c := range spec.GetCallbacks() {
		r.Spec.Callbacks = append(r.Spec.Callbacks, dag.Callback{Webhook: webhookFromProto(c.GetWebhook()), On: c.GetOn()})
	}
	for name, p := range spec.GetParams() {
		if r.Spec.Params == nil {
			r.Spec.Params = map[string]dag.Param{}
		}
		dp := dag.Param{Type: expr.Type(p.GetType()), Default: payloadFromProto(p.GetDefault()), Description: p.GetDescription()}
		for _, e := range p.GetEnum() {
			dp.Enum = append(dp.Enum, payloadFromProto(e))
		}
		r.Spec.Params[name] = dp
	}
	for _, st := range spec.GetSteps() {
		r.Spec.Steps = append(r.Spec.Steps, dag.Step{
			Name: st.GetName(), Needs: st.GetNeeds(), TriggerRule: dag.TriggerRule(st.GetTriggerRule()), When: st.GetWhen(), Run: executorFromProto(st.GetRun()),
			Payload: payloadFromProto(st.GetPayload()), Queue: st.GetQueue(), Priority: st.GetPriority(),
			Timeout: durationFromProto(st.GetTimeout()), Retry: retryFromProto(st.GetRetry()),
			ForEach: st.GetForEach(), MaxParallel: int(st.GetMaxParallel()), MinSuccess: dag.MinSuccess(st.GetMinSuccess()),
			Resources: resourcesFromProto(st.GetResources()), ResourceProfile: st.GetResourceProfile(), Sleep: sleepFromProto(st.GetSleep()),
			Wait: waitFromProto(st.GetWait()), Approval: approvalFromProto(st.GetApproval()),
			Concurrency: limitsFromProto(st.GetConcurrency()), RateLimit: rateFromProto(st.GetRateLimit()),
		})
	}
	return r
}

func rateFromProto(r *orreryv1.RateLimit) *dag.RateLimit {
	if r == nil {
		return nil
	}
	return &dag.RateLimit{Key: r.GetKey(), Limit: int(r.GetLimit()), Per: dag.Duration{Duration: r.GetPer().AsDuration()}}
}

func rateToProto(r *dag.RateLimit) *orreryv1.RateLimit {
	if r == nil {
		return nil
	}
	return &orreryv1.RateLimit{Key: r.Key, Limit: int32(r.Limit), Per: durationpb.New(r.Per.Duration)}
}

func limitsFromProto(ls []*orreryv1.ConcurrencyLimit) []dag.ConcurrencyLimit {
	var out []dag.ConcurrencyLimit
	for _, c := range ls {
		out = append(out, dag.ConcurrencyLimit{Key: c.GetKey(), Limit: int(c.GetLimit()), OnLimit: dag.OnLimit(c.GetOnLimit())})
	}
	return out
}

func limitsToProto(ls []dag.ConcurrencyLimit) []*orreryv1.ConcurrencyLimit {
	var out []*orreryv1.ConcurrencyLimit
	for _, c := range ls {
		out = append(out, &orreryv1.ConcurrencyLimit{Key: c.Key, Limit: int32(c.Limit), OnLimit: string(c.OnLimit)})
	}
	return out
}

func sleepFromProto(s *orreryv1.Sleep) *dag.Sleep {
	switch {
	case s == nil:
		return nil
	case s.GetUntil() != "":
		return &dag.Sleep{Until: s.GetUntil()}
	}
	return &dag.Sleep{For: s.GetDuration().AsDuration()}
}

func waitFromProto(w *orreryv1.Wait) *dag.Wait {
	if w == nil {
		return nil
	}
	return &dag.Wait{Event: w.GetEvent(), Match: w.GetMatch(), Timeout: durationFromProto(w.GetTimeout()), OnTimeout: dag.OnTimeout(w.GetOnTimeout())}
}

func waitToProto(w *dag.Wait) *orreryv1.Wait {
	if w == nil {
		return nil
	}
	return &orreryv1.Wait{Event: w.Event, Match: w.Match, Timeout: durationToProto(w.Timeout), OnTimeout: string(w.OnTimeout)}
}

func approvalFromProto(a *orreryv1.Approval) *dag.Approval {
	if a == nil {
		return nil
	}
	return &dag.Approval{Role: a.GetRole(), Principals: a.GetPrincipals(), Count: int(a.GetCount()), Separate: a.GetSeparate(),
		Timeout: durationFromProto(a.GetTimeout()), OnTimeout: dag.OnTimeout(a.GetOnTimeout()), Message: a.GetMessage()}
}

func approvalToProto(a *dag.Approval) *orreryv1.Approval {
	if a == nil {
		return nil
	}
	return &orreryv1.Approval{Role: a.Role, Principals: a.Principals, Count: int32(a.Count), Separate: a.Separate,
		Timeout: durationToProto(a.Timeout), OnTimeout: string(a.OnTimeout), Message: a.Message}
}

func sleepToProto(s *dag.Sleep) *orreryv1.Sleep {
	switch {
	case s == nil:
		return nil
	case s.Until != "":
		return &orreryv1.Sleep{Kind: &orreryv1.Sleep_Until{Until: s.Until}}
	}
	return &orreryv1.Sleep{Kind: &orreryv1.Sleep_Duration{Duration: durationpb.New(s.For)}}
}

func webhookFromProto(w *orreryv1.Webhook) dag.Webhook {
	return dag.Webhook{URL: w.GetUrl(), Headers: w.GetHeaders(), Secret: w.GetSecret()}
}

func webhookToProto(w dag.Webhook) *orreryv1.Webhook {
	return &orreryv1.Webhook{Url: w.URL, Headers: w.Headers, Secret: w.Secret}
}

func scheduleFromProto(s *orreryv1.Schedule) schedule.Spec {
	out := schedule.Spec{Timezone: s.GetTimezone(), At: s.GetAt(), Start: s.GetStart(), End: s.GetEnd(),
		Jitter: durationFromProto(s.GetJitter()), CatchupWindow: durationFromProto(s.GetCatchupWindow())}
	if s.GetCron() != "" {
		out.Cron = schedule.Crons(s.GetCron())
	}
	out.Cron = append(out.Cron, s.GetCrons()...)
	if e := s.GetExclude(); e != nil {
		out.Exclude = &schedule.Exclude{Dates: e.GetDates(), Cron: e.GetCron()}
	}
	if a := s.GetAfter(); a != nil {
		out.After = &schedule.After{Job: a.GetJob(), Namespace: a.GetNamespace(), On: a.GetOn()}
	}
	if e := s.GetEvent(); e != nil {
		out.Event = &schedule.Event{Type: e.GetType(), Filter: e.GetFilter()}
	}
	return out
}

// ScheduleToProto is the inverse of scheduleFromProto.
func ScheduleToProto(s schedule.Spec) *orreryv1.Schedule {
	out := &orreryv1.Schedule{Timezone: s.Timezone, At: s.At, Start: s.Start, End: s.End,
		Jitter: durationToProto(s.Jitter), CatchupWindow: durationToProto(s.CatchupWindow)}
	if len(s.Cron) == 1 {
		out.Cron = s.Cron[0]
	} else {
		out.Crons = s.Cron
	}
	if e := s.Exclude; e != nil {
		out.Exclude = &orreryv1.ScheduleExclude{Dates: e.Dates, Cron: e.Cron}
	}
	if a := s.After; a != nil {
		out.After = &orreryv1.ScheduleAfter{Job: a.Job, Namespace: a.Namespace, On: a.On}
	}
	if e := s.Event; e != nil {
		out.Event = &orreryv1.ScheduleEvent{Type: e.Type, Filter: e.Filter}
	}
	return out
}

// ScheduleFromProto is the schedule a message describes (unvalidated).
func ScheduleFromProto(s *orreryv1.Schedule) schedule.Spec { return scheduleFromProto(s) }

func executorFromProto(e *orreryv1.Executor) dag.Executor {
	var out dag.Executor
	switch k := e.GetKind().(type) {
	case *orreryv1.Executor_Http:
		out.HTTP = &dag.HTTPExecutor{URL: k.Http.GetUrl(), Method: k.Http.GetMethod(), Headers: k.Http.GetHeaders()}
	case *orreryv1.Executor_Command:
		out.Command = &dag.CommandExecutor{Argv: k.Command.GetArgv(), Env: k.Command.GetEnv(), Dir: k.Command.GetDir()}
	case *orreryv1.Executor_Handler:
		out.Handler = k.Handler
	case *orreryv1.Executor_Worker:
		out.Worker = k.Worker
	case *orreryv1.Executor_Job:
		out.Job = &dag.JobCall{Name: k.Job.GetName(), Namespace: k.Job.GetNamespace(), Params: structToPayload(k.Job.GetParams())}
	}
	return out
}

func retryFromProto(r *orreryv1.RetryPolicy) *dag.Retry {
	if r == nil {
		return nil
	}
	return &dag.Retry{MaxAttempts: int(r.GetMaxAttempts()), Initial: durationFromProto(r.GetInitial()), Max: durationFromProto(r.GetMax())}
}

func durationFromProto(d *durationpb.Duration) *dag.Duration {
	if d == nil {
		return nil
	}
	return dag.D(d.AsDuration())
}

// payloadFromProto turns a google.protobuf.Value into the JSON text the
// engine keeps. A Value holds numbers as doubles, so an integer beyond
// 2^53 arrives already rounded (9007199254740993 as 9007199254740992) and
// cannot be restored here; it is written as the number it is, and
// validation then rejects every payload number whose magnitude exceeds
// 2^53-1 (dag.MaxPayloadInteger) with InvalidArgument naming the payload
// and the limit, rather than storing a rounded one. The same rule applies
// to YAML and JSON payloads (`orrery validate`, `apply`), which otherwise
// keep their numbers exactly as written, so that a payload is either exact
// on every path or refused on every path. Integers that need more go in
// strings. A Value with no JSON form (NaN, Infinity, no kind set) becomes
// text that validation reports as not valid JSON.
func payloadFromProto(v *structpb.Value) dag.Payload {
	if v == nil {
		return nil
	}
	b, err := protojson.Marshal(v)
	if err != nil {
		return dag.Payload("invalid") // reported by validation as not JSON
	}
	return dag.Payload(b)
}

// structToPayload is a Struct's JSON (nil for none).
func structToPayload(s *structpb.Struct) dag.Payload {
	if s == nil {
		return nil
	}
	return payloadFromProto(structpb.NewStructValue(s))
}

// payloadToStruct is a JSON object's Struct (nil for none, or for JSON
// that is not an object: validation refuses it).
func payloadToStruct(p dag.Payload) *structpb.Struct {
	if len(p) == 0 {
		return nil
	}
	s := new(structpb.Struct)
	if err := protojson.Unmarshal(p, s); err != nil {
		return nil
	}
	return s
}

// ResourceToProto is the inverse of ResourceFromProto.
func ResourceToProto(r dag.Resource) (*orreryv1.JobMetadata, *orreryv1.JobSpec) {
	md := &orreryv1.JobMetadata{Name: r.Metadata.Name, Namespace: r.Metadata.Namespace, Description: r.Metadata.Description, Labels: r.Metadata.Labels}
	s := r.Spec
	spec := &orreryv1.JobSpec{
		Schedule:    ScheduleToProto(s.Schedule),
		Misfire:     string(s.Misfire),
		MaxBackfill: int32(s.MaxBackfill),
		Overlap:     string(s.Overlap),
		Payload:     payloadToProto(s.Payload),

		PauseAfterFailures: int32(s.PauseAfterFailures),
	}
	spec.Concurrency = limitsToProto(s.Concurrency)
	if d := s.Debounce; d != nil {
		spec.Debounce = &orreryv1.Debounce{Key: d.Key, Period: durationpb.New(d.Period.Duration)}
		if d.MaxWait.Duration != 0 {
			spec.Debounce.MaxWait = durationpb.New(d.MaxWait.Duration)
		}
	}
	d := s.Defaults
	if d.Queue != "" || d.Priority != "" || d.Timeout != nil || d.Retry != nil || d.Resources != nil || d.ResourceProfile != "" {
		spec.Defaults = &orreryv1.StepDefaults{Queue: d.Queue, Priority: d.Priority, Timeout: durationToProto(d.Timeout), Retry: retryToProto(d.Retry),
			Resources: resourcesToProto(d.Resources), ResourceProfile: d.ResourceProfile}
	}
	if s.Run != nil {
		spec.Run = executorToProto(*s.Run)
	}
	if a := s.Alerts; a != nil {
		spec.Alerts = &orreryv1.Alerts{StartWithin: durationToProto(a.StartWithin), FinishWithin: durationToProto(a.FinishWithin), On: a.On}
		for _, n := range a.Notify {
			pn := &orreryv1.Notify{}
			if n.Webhook != nil {
				pn.Webhook = webhookToProto(*n.Webhook)
			}
			spec.Alerts.Notify = append(spec.Alerts.Notify, pn)
		}
	}
	for _, c := range s.Callbacks {
		spec.Callbacks = append(spec.Callbacks, &orreryv1.Callback{Webhook: webhookToProto(c.Webhook), On: c.On})
	}
	for name, p := range s.Params {
		if spec.Params == nil {
			spec.Params = map[string]*orreryv1.Param{}
		}
		pp := &orreryv1.Param{Type: string(p.Type), Default: payloadToProto(p.Default), Description: p.Description}
		for _, e := range p.Enum {
			pp.Enum = append(pp.Enum, payloadToProto(e))
		}
		spec.Params[name] = pp
	}
	for _, st := range s.Steps {
		spec.Steps = append(spec.Steps, &orreryv1.Step{
			Name: st.Name, Needs: st.Needs, TriggerRule: string(st.TriggerRule), When: st.When, Run: executorToProto(st.Run),
			Payload: payloadToProto(st.Payload), Queue: st.Queue, Priority: st.Priority,
			Timeout: durationToProto(st.Timeout), Retry: retryToProto(st.Retry),
			ForEach: st.ForEach, MaxParallel: int32(st.MaxParallel), MinSuccess: string(st.MinSuccess),
			Resources: resourcesToProto(st.Resources), ResourceProfile: st.ResourceProfile, Sleep: sleepToProto(st.Sleep),
			Wait: waitToProto(st.Wait), Approval: approvalToProto(st.Approval),
			Concurrency: limitsToProto(st.Concurrency), RateLimit: rateToProto(st.RateLimit),
		})
	}
	return md, spec
}

func executorToProto(e dag.Executor) *orreryv1.Executor {
	switch {
	case e.HTTP != nil:
		return &orreryv1.Executor{Kind: &orreryv1.Executor_Http{Http: &orreryv1.HttpExecutor{Url: e.HTTP.URL, Method: e.HTTP.Method, Headers: e.HTTP.Headers}}}
	case e.Command != nil:
		return &orreryv1.Executor{Kind: &orreryv1.Executor_Command{Command: &orreryv1.CommandExecutor{Argv: e.Command.Argv, Env: e.Command.Env, Dir: e.Command.Dir}}}
	case e.Handler != "":
		return &orreryv1.Executor{Kind: &orreryv1.Executor_Handler{Handler: e.Handler}}
	case e.Worker != "":
		return &orreryv1.Executor{Kind: &orreryv1.Executor_Worker{Worker: e.Worker}}
	case e.Job != nil:
		return &orreryv1.Executor{Kind: &orreryv1.Executor_Job{Job: &orreryv1.JobCall{Name: e.Job.Name, Namespace: e.Job.Namespace, Params: payloadToStruct(e.Job.Params)}}}
	}
	return nil
}

func retryToProto(r *dag.Retry) *orreryv1.RetryPolicy {
	if r == nil {
		return nil
	}
	return &orreryv1.RetryPolicy{MaxAttempts: int32(r.MaxAttempts), Initial: durationToProto(r.Initial), Max: durationToProto(r.Max)}
}

func durationToProto(d *dag.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	return durationpb.New(d.Duration)
}

func payloadToProto(p dag.Payload) *structpb.Value {
	if len(p) == 0 {
		return nil
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal(p, v); err != nil {
		return nil
	}
	return v
}

var statusToProto = map[string]orreryv1.JobStatus{
	job.StatusActive:  orreryv1.JobStatus_JOB_STATUS_ACTIVE,
	job.StatusPaused:  orreryv1.JobStatus_JOB_STATUS_PAUSED,
	job.StatusDeleted: orreryv1.JobStatus_JOB_STATUS_DELETED,
}

// StatusName is the engine's name of a proto status ("" for unspecified).
func StatusName(s orreryv1.JobStatus) string {
	for name, v := range statusToProto {
		if v == s {
			return name
		}
	}
	return ""
}

func jobToProto(j *job.Job) *orreryv1.Job {
	md, spec := ResourceToProto(j.Resource())
	return &orreryv1.Job{
		Id: j.ID.String(), Metadata: md, Spec: spec, Status: statusToProto[j.Status], Version: j.Version,
		Shard: int32(j.Shard), NextFireTime: timeToProto(j.NextFireAt),
		CreateTime: timestamppb.New(j.CreatedAt), CreatedBy: j.CreatedBy,
		UpdateTime: timestamppb.New(j.UpdatedAt), UpdatedBy: j.UpdatedBy, DeleteTime: timeToProto(j.DeletedAt),
		Source: sourceToProto(j.Source), LastRun: lastRunToProto(j.LastRun),
	}
}

func lastRunToProto(r *job.LastRun) *orreryv1.LastRun {
	if r == nil {
		return nil
	}
	return &orreryv1.LastRun{Id: r.ID.String(), Status: string(r.Status), ScheduledTime: timestamppb.New(r.ScheduledFor)}
}

func sourceToProto(s *job.Source) *orreryv1.Source {
	if s == nil {
		return nil
	}
	return &orreryv1.Source{Path: s.Path, Commit: s.Commit}
}

// timeFromProto checks a request's timestamp: a valid Timestamp within
// schedule.Earliest..schedule.Latest (1970 to 9999), else InvalidArgument
// naming field.
func timeFromProto(field string, ts *timestamppb.Timestamp) (time.Time, error) {
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, &dag.FieldError{Field: field, Message: "not a valid timestamp: " + err.Error()}
	}
	t := ts.AsTime()
	if err := schedule.CheckInstant(t); err != nil {
		return time.Time{}, &dag.FieldError{Field: field, Message: err.Error()}
	}
	return t, nil
}

// rangeFromProto reads a request's from and to, both required.
func rangeFromProto(from, to *timestamppb.Timestamp) (time.Time, time.Time, error) {
	var out [2]time.Time
	for i, f := range []struct {
		name string
		ts   *timestamppb.Timestamp
	}{{"from", from}, {"to", to}} {
		if f.ts == nil {
			return time.Time{}, time.Time{}, &dag.FieldError{Field: f.name, Message: "must be given"}
		}
		t, err := timeFromProto(f.name, f.ts)
		if err != nil {
			return time.Time{}, time.Time{}, err
		}
		out[i] = t
	}
	return out[0], out[1], nil
}

func timeToProto(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

func timesToProto(ts []time.Time) []*timestamppb.Timestamp {
	out := make([]*timestamppb.Timestamp, len(ts))
	for i, t := range ts {
		out[i] = timestamppb.New(t)
	}
	return out
}

func resourcesFromProto(r *orreryv1.Resources) *dag.Resources {
	if r == nil {
		return nil
	}
	out := &dag.Resources{CPU: dag.Quantity(r.GetCpu()), Memory: dag.Quantity(r.GetMemory()), GPU: dag.Quantity(r.GetGpu())}
	for name, q := range r.GetCustom() {
		if out.Custom == nil {
			out.Custom = map[string]dag.Quantity{}
		}
		out.Custom[name] = dag.Quantity(q)
	}
	return out
}

func resourcesToProto(r *dag.Resources) *orreryv1.Resources {
	if r == nil {
		return nil
	}
	out := &orreryv1.Resources{Cpu: string(r.CPU), Memory: string(r.Memory), Gpu: string(r.GPU)}
	for name, q := range r.Custom {
		if out.Custom == nil {
			out.Custom = map[string]string{}
		}
		out.Custom[name] = string(q)
	}
	return out
}

// vectorToProto writes resources as a user reads them (cpu in cores or
// millicores, memory in binary units where exact).
func vectorToProto(v resources.Vector) *orreryv1.Resources {
	s := v.Spec()
	return &orreryv1.Resources{Cpu: s.CPU, Memory: s.Memory, Gpu: s.GPU, Custom: s.Custom}
}

// ResourceUsage writes a worker's resources as the CLI and the web UI
// show them, each what its
// attempts use of what it has: "cpu 2/16, memory 4Gi/60Gi, gpu 0/2"; "-"
// for a worker that declares none.
func ResourceUsage(capacity, used *orreryv1.Resources) string {
	if capacity == nil {
		return "-"
	}
	get := func(r *orreryv1.Resources, name string) string {
		var q string
		switch name {
		case resources.CPU:
			q = r.GetCpu()
		case resources.Memory:
			q = r.GetMemory()
		case resources.GPU:
			q = r.GetGpu()
		default:
			q = r.GetCustom()[name]
		}
		if q == "" {
			return "0"
		}
		return q
	}
	names := []string{resources.CPU, resources.Memory}
	if capacity.GetGpu() != "" || used.GetGpu() != "" {
		names = append(names, resources.GPU)
	}
	custom := maps.Clone(capacity.GetCustom())
	if custom == nil {
		custom = map[string]string{}
	}
	maps.Copy(custom, used.GetCustom())
	names = append(names, slices.Sorted(maps.Keys(custom))...)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + " " + get(used, name) + "/" + get(capacity, name)
	}
	return strings.Join(parts, ", ")
}

// ResourcesText writes resources as the CLI and the web UI show them:
// "cpu 8, memory 64Gi, gpu 1, licence 2" ("-" for none).
func ResourcesText(r *orreryv1.Resources) string {
	var parts []string
	for _, p := range []struct{ name, q string }{{resources.CPU, r.GetCpu()}, {resources.Memory, r.GetMemory()}, {resources.GPU, r.GetGpu()}} {
		if p.q != "" {
			parts = append(parts, p.name+" "+p.q)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.GetCustom())) {
		parts = append(parts, name+" "+r.GetCustom()[name])
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// Utilization writes what the live workers' running attempts ask for of
// what they declare, together, resource by resource, as the overview shows
// it: "cpu 3/16 (19%), memory 4Gi/60Gi (7%)"; "" when no live worker
// declares its capacity.
func Utilization(workers []*orreryv1.Worker) string {
	var capacity, used resources.Vector
	for _, w := range workers {
		if !w.GetLive() || w.GetCapacity() == nil {
			continue
		}
		c, err1 := resourcesFromProto(w.GetCapacity()).Vector()
		u, err2 := resourcesFromProto(w.GetAllocated()).Vector()
		if err1 != nil || err2 != nil {
			continue
		}
		capacity, used = capacity.Add(c), used.Add(u)
	}
	var parts []string
	for _, name := range capacity.Names() {
		parts = append(parts, fmt.Sprintf("%s %s/%s (%.0f%%)", name, resources.Format(name, used.Get(name)),
			resources.Format(name, capacity.Get(name)), 100*float64(used.Get(name))/float64(capacity.Get(name))))
	}
	return strings.Join(parts, ", ")
}
