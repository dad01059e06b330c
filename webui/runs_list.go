package webui

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/internal/lifecycle"
)

// runsPage lists the runs the viewer may see across jobs, newest instant
// first, by status, namespace, job, trigger and a range of instants
// (RunService.ListRuns, keyset pages), a failed run's first error in its
// row.
// filterStatuses are the run statuses the runs list filters by: every
// status a run shows (a dead-lettered one shows as failed, RunStatus.Ended).
var filterStatuses = slices.DeleteFunc(slices.Clone(lifecycle.RunStatuses), func(s lifecycle.RunStatus) bool { return s != s.Ended() })

func (s *Server) runsPage(w http.ResponseWriter, r *http.Request, v *view) error {
	q := r.URL.Query()
	req := &orreryv1.ListRunsRequest{Status: q.Get("status"), Namespace: q.Get("namespace"), Trigger: q.Get("trigger"),
		PageToken: q.Get("page"), PageSize: 50}
	if job := q.Get("job"); job != "" {
		req.Job = &orreryv1.JobRef{Namespace: req.Namespace, Name: job}
		req.Namespace = ""
	}
	cli := "orrery runs list"
	for _, f := range []struct{ field, flag string }{{"since", "--since"}, {"until", "--until"}} {
		text := strings.TrimSpace(q.Get(f.field))
		if text == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, text)
		if err != nil {
			return badInput(f.field + ": give an RFC 3339 time such as 2026-12-01T00:00:00Z")
		}
		if f.field == "since" {
			req.Since = timestamppb.New(t)
		} else {
			req.Until = timestamppb.New(t)
		}
		cli += " " + f.flag + " " + text
	}
	res, err := s.clients.runs.ListRuns(v.ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	for _, f := range []struct{ flag, v string }{{"-n", q.Get("namespace")}, {"--job", q.Get("job")}, {"--status", req.Status}, {"--trigger", req.Trigger}} {
		if f.v != "" {
			cli += " " + f.flag + " " + shellQuote(f.v)
		}
	}
	s.render(w, r, v, http.StatusOK, "runs", map[string]any{"Runs": res.Msg.GetRuns(), "Q": q,
		"Statuses": filterStatuses, "Triggers": lifecycle.Triggers,
		"Next": nextPageURL("/runs", q, res.Msg.GetNextPageToken()), "CLI": cli})
	return nil
}
