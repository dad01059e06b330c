package webui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/expr"
	"github.com/orrery-dev/orrery/internal/access"
)

// jobsPage lists jobs: filters by namespace, status, label and name (as
// you type, with htmx), keyset pages (no counts), next fire in the job's
// zone and the viewer's, last run, and the actions the role allows.
func (s *Server) jobsPage(w http.ResponseWriter, r *http.Request, v *view) error {
	q := r.URL.Query()
	req := &orreryv1.ListJobsRequest{Namespace: q.Get("ns"), NameContains: q.Get("q"), PageToken: q.Get("page"), PageSize: 50}
	switch q.Get("status") {
	case "active":
		req.Status = orreryv1.JobStatus_JOB_STATUS_ACTIVE
	case "paused":
		req.Status = orreryv1.JobStatus_JOB_STATUS_PAUSED
	case "":
	default:
		return errorf("status: want active or paused")
	}
	if l := q.Get("label"); l != "" {
		k, val, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return errorf("label: want key=value")
		}
		req.Labels = map[string]string{k: val}
	}
	res, err := s.clients.jobs.ListJobs(v.ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	next := nextPageURL("/jobs", q, res.Msg.GetNextPageToken())
	cli := "orrery jobs list"
	if req.Namespace != "" {
		cli += " -n " + shellQuote(req.Namespace)
	}
	if st := q.Get("status"); st != "" {
		cli += " --status " + shellQuote(st)
	}
	s.render(w, r, v, http.StatusOK, "jobs", map[string]any{
		"Jobs": res.Msg.GetJobs(), "Next": next, "Q": q.Get("q"), "NS": req.Namespace, "Status": q.Get("status"),
		"Label": q.Get("label"), "Paged": req.PageToken != "", "CLI": cli,
	})
	return nil
}

// jobPage shows one job: its definition, next fire times, the schedule
// ledger, recent runs and version history.
func (s *Server) jobPage(w http.ResponseWriter, r *http.Request, v *view) error {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	res, err := s.clients.jobs.GetJob(v.ctx, connect.NewRequest(&orreryv1.GetJobRequest{
		Ref: &orreryv1.JobRef{Namespace: ns, Name: name}, Upcoming: 10, History: 50}))
	if err != nil {
		return err
	}
	j := res.Msg.GetJob()
	runs, err := s.clients.runs.ListRuns(v.ctx, connect.NewRequest(&orreryv1.ListRunsRequest{
		Job: &orreryv1.JobRef{Id: j.GetId()}, PageSize: 500, Since: ledgerSince(j)}))
	if err != nil {
		return err
	}
	md, spec := j.GetMetadata(), j.GetSpec()
	resource := api.ResourceFromProto(md, spec)
	var def strings.Builder
	enc := yaml.NewEncoder(&def)
	enc.SetIndent(2)
	if err := enc.Encode(resource); err != nil {
		return err
	}
	recent := runs.Msg.GetRuns()
	if len(recent) > 20 {
		recent = recent[:20]
	}
	last, err := s.clients.runs.ListRuns(v.ctx, connect.NewRequest(&orreryv1.ListRunsRequest{
		Job: &orreryv1.JobRef{Id: j.GetId()}, PageSize: 50, WithSteps: true}))
	if err != nil {
		return err
	}
	backfills, err := s.clients.jobs.ListBackfills(v.ctx, connect.NewRequest(&orreryv1.ListBackfillsRequest{Ref: &orreryv1.JobRef{Id: j.GetId()}}))
	if err != nil {
		return err
	}
	s.render(w, r, v, http.StatusOK, "job", map[string]any{
		"Params": paramFields(resource.Spec.Params), "Backfills": backfills.Msg.GetBackfills(),
		"DST": dag.ScheduleWarnings(resource.Spec.Schedule, time.Now()), "Cron": len(resource.Spec.Schedule.Cron) > 0,
		"Job": j, "Zone": spec.GetSchedule().GetTimezone(), "YAML": def.String(), "Upcoming": res.Msg.GetNextFireTimes(),
		"Ledger": buildLedger(j, res.Msg.GetHistory(), runs.Msg.GetRuns()), "Runs": recent, "History": res.Msg.GetHistory(),
		"Grid":     buildGrid(resource.Spec, last.Msg.GetRuns()),
		"CanEdit":  v.can(access.Editor, md.GetNamespace(), md.GetName()),
		"Upstream": res.Msg.GetUpstream(), "Downstream": res.Msg.GetDownstream(),
		"Calls": res.Msg.GetCalls(), "Callers": res.Msg.GetCallers(),
		"CLI": "orrery jobs get " + md.GetName() + " -n " + md.GetNamespace(),
	})
	return nil
}

// jobAction pauses, resumes or triggers a job, then goes back where the
// form was.
func (s *Server) jobAction(w http.ResponseWriter, r *http.Request, v *view) error {
	ref := &orreryv1.JobRef{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
	back := r.PostFormValue("back")
	var flash string
	switch r.PathValue("action") {
	case "pause":
		if _, err := s.clients.jobs.PauseJob(v.ctx, connect.NewRequest(&orreryv1.PauseJobRequest{Ref: ref})); err != nil {
			return err
		}
		flash = "Paused " + ref.Namespace + "/" + ref.Name + "."
	case "resume":
		if _, err := s.clients.jobs.ResumeJob(v.ctx, connect.NewRequest(&orreryv1.ResumeJobRequest{Ref: ref})); err != nil {
			return err
		}
		flash = "Resumed " + ref.Namespace + "/" + ref.Name + "."
	case "backfill":
		return s.backfill(w, r, v, ref)
	case "cancel-backfill":
		if _, err := s.clients.jobs.CancelBackfill(v.ctx, connect.NewRequest(&orreryv1.CancelBackfillRequest{Ref: ref, Id: r.PostFormValue("id")})); err != nil {
			return err
		}
		return seeOther(w, r, "/jobs/"+ref.Namespace+"/"+ref.Name, "Cancelled the backfill.")
	case "trigger":
		texts := map[string]string{}
		for k, vs := range r.PostForm {
			if name, ok := strings.CutPrefix(k, "param."); ok && len(vs) == 1 {
				texts[name] = vs[0]
			}
		}
		res, err := s.clients.runs.TriggerJob(v.ctx, connect.NewRequest(&orreryv1.TriggerJobRequest{Job: ref, ParamTexts: texts}))
		if err != nil {
			return err
		}
		return seeOther(w, r, "/runs/"+res.Msg.GetRun().GetId(), "Triggered "+ref.Namespace+"/"+ref.Name+".")
	default:
		return errNotFound
	}
	return seeOther(w, r, back, flash)
}

// backfill asks for a backfill (or a dry run) from the job page's form:
// from and to as RFC 3339 (or the browser's datetime-local, read as UTC).
func (s *Server) backfill(w http.ResponseWriter, r *http.Request, v *view, ref *orreryv1.JobRef) error {
	req := &orreryv1.BackfillRequest{Ref: ref, Redo: r.PostFormValue("redo"), NewestFirst: r.PostFormValue("newest_first") != "",
		DryRun: r.PostFormValue("dry_run") != "", AllowLarge: r.PostFormValue("allow_large") != ""}
	if n := r.PostFormValue("max_concurrent"); n != "" {
		v, err := strconv.ParseInt(n, 10, 32)
		if err != nil {
			return badInput(fmt.Sprintf("max_concurrent: %q is not a whole number", n))
		}
		req.MaxConcurrent = int32(v)
	}
	for _, f := range []struct {
		name string
		to   **timestamppb.Timestamp
	}{{"from", &req.From}, {"to", &req.To}} {
		text := r.PostFormValue(f.name)
		t, err := time.Parse(time.RFC3339, text)
		if err != nil {
			if t, err = time.Parse("2006-01-02T15:04", text); err != nil {
				return badInput(fmt.Sprintf("%s: %q is not an instant such as 2026-11-01T00:00:00Z", f.name, text))
			}
		}
		*f.to = timestamppb.New(t)
	}
	res, err := s.clients.jobs.Backfill(v.ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	back := "/jobs/" + ref.Namespace + "/" + ref.Name
	m := res.Msg
	if req.DryRun {
		msg := fmt.Sprintf("Dry run: %d instants, %d of them have a run already", m.GetTotal(), m.GetHaveRuns())
		if is := m.GetInstants(); len(is) > 0 {
			msg += fmt.Sprintf("; first %s, last %s", is[0].AsTime().UTC().Format(time.RFC3339), is[len(is)-1].AsTime().UTC().Format(time.RFC3339))
		}
		return seeOther(w, r, back, msg+". Nothing was written.")
	}
	return seeOther(w, r, back, fmt.Sprintf("Backfill %s asked for: %d instants.", m.GetBackfill().GetId(), m.GetBackfill().GetTotal()))
}

var plainArg = regexp.MustCompile(`^[A-Za-z0-9_./:=@,+-]+$`)

// shellQuote makes a value safe to paste into a POSIX shell as one word:
// "copy as CLI" strings hold what the viewer typed in filters.
func shellQuote(v string) string {
	if plainArg.MatchString(v) {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

// nextPageURL is the address of a list's next page: the same filters
// (query q) with the next page's token; "" after the last page.
func nextPageURL(path string, q url.Values, token string) string {
	if token == "" {
		return ""
	}
	nq := url.Values{}
	for k, vs := range q {
		if k != "page" {
			nq[k] = vs
		}
	}
	nq.Set("page", token)
	return path + "?" + nq.Encode()
}

// paramField is one param of a job as the trigger form asks for it.
type paramField struct {
	Name, Type, Description string
	Value                   string   // the default, as text ("" without one)
	Enum                    []string // as text, when the param has one
	Required                bool
}

// paramFields lists a job's params in name order, each with its default
// written as the form's text: a string as it is, the rest as JSON (what
// dag.Param.ParamText reads back).
func paramFields(params map[string]dag.Param) []paramField {
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	text := func(p dag.Param, v dag.Payload) string {
		var s string
		if p.Type == expr.String && json.Unmarshal(v, &s) == nil {
			return s
		}
		return string(v)
	}
	out := make([]paramField, len(names))
	for i, n := range names {
		p := params[n]
		f := paramField{Name: n, Type: string(p.Type), Description: p.Description, Required: len(p.Default) == 0}
		if len(p.Default) > 0 {
			f.Value = text(p, p.Default)
		}
		for _, e := range p.Enum {
			f.Enum = append(f.Enum, text(p, e))
		}
		out[i] = f
	}
	return out
}

// backfillHandled is how many of a backfill's instants it has handled:
// written, left alone, or run again.
func backfillHandled(b *orreryv1.JobBackfill) int32 {
	return b.GetCreated() + b.GetExisting() + b.GetRetried()
}
