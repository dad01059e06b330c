package webui

import (
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/internal/access"
)

// dlqShown bounds the dead letters one page reads (the newest).
const dlqShown = 1000

// dlqGroup is the dead letters of one job that failed with one error.
type dlqGroup struct {
	Namespace, Job, Error string
	Letters               []*orreryv1.DeadLetter
	IDs                   string // comma-separated task ids, for "replay the group"
	CanReplay             bool
}

// headline is an error's first line, shortened: what groups letters.
func headline(e string) string {
	e, _, _ = strings.Cut(e, "\n")
	if len(e) > 160 {
		e = e[:159] + "…"
	}
	return e
}

// dlqPage lists dead letters grouped by job and error, newest first,
// with replay of one, a group, or all (after a dry-run count).
func (s *Server) dlqPage(w http.ResponseWriter, r *http.Request, v *view) error {
	res, err := s.clients.runs.ListDeadLetters(v.ctx, connect.NewRequest(&orreryv1.ListDeadLettersRequest{PageSize: 500}))
	if err != nil {
		return err
	}
	letters := res.Msg.GetDeadLetters()
	more := res.Msg.GetNextPageToken() != ""
	if more {
		res2, err := s.clients.runs.ListDeadLetters(v.ctx, connect.NewRequest(&orreryv1.ListDeadLettersRequest{PageSize: 500, PageToken: res.Msg.GetNextPageToken()}))
		if err != nil {
			return err
		}
		letters = append(letters, res2.Msg.GetDeadLetters()...)
		more = res2.Msg.GetNextPageToken() != ""
	}
	var groups []*dlqGroup
	index := map[string]*dlqGroup{}
	for _, d := range letters {
		key := d.GetNamespace() + "/" + d.GetJob() + "\x00" + headline(d.GetLastError())
		g := index[key]
		if g == nil {
			g = &dlqGroup{Namespace: d.GetNamespace(), Job: d.GetJob(), Error: headline(d.GetLastError()),
				CanReplay: v.can(access.Admin, d.GetNamespace(), d.GetJob())}
			index[key] = g
			groups = append(groups, g)
		}
		g.Letters = append(g.Letters, d)
	}
	for _, g := range groups {
		ids := make([]string, len(g.Letters))
		for i, d := range g.Letters {
			ids[i] = d.GetTaskId()
		}
		g.IDs = strings.Join(ids, ",")
	}
	s.render(w, r, v, http.StatusOK, "dlq", map[string]any{
		"Groups": groups, "Count": len(letters), "More": more, "CanReplayAll": v.P.Role.Allows(access.Admin),
		"CLI": "orrery dlq list",
	})
	return nil
}

// dlqReplay replays dead letters: task ids (one, or a group), or all of
// the tenant. "All" first answers with how many there are (a dry run)
// and replays only once confirmed.
func (s *Server) dlqReplay(w http.ResponseWriter, r *http.Request, v *view) error {
	req := &orreryv1.ReplayDeadLettersRequest{}
	if ids := r.PostFormValue("task_ids"); ids != "" {
		for _, id := range strings.Split(ids, ",") {
			u, err := uuid.Parse(strings.TrimSpace(id))
			if err != nil {
				return errorf("task_ids: %q is not a task id", id)
			}
			req.TaskIds = append(req.TaskIds, u.String())
		}
		if len(req.TaskIds) > dlqShown {
			return errorf("task_ids: at most %d at once", dlqShown)
		}
	} else if !v.P.Role.Allows(access.Admin) {
		return errorf("replaying every dead letter needs an admin of the whole tenant; replay a job's group instead")
	} else if r.PostFormValue("confirm") != "yes" {
		n, more, err := s.countDeadLetters(v)
		if err != nil {
			return err
		}
		count := fmt.Sprint(n)
		if more {
			count += " or more (up to 10,000 are replayed at once)"
		}
		s.render(w, r, v, http.StatusOK, "dlq", map[string]any{"Confirm": count, "CLI": "orrery dlq replay --all"})
		return nil
	}
	res, err := s.clients.runs.ReplayDeadLetters(v.ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	return seeOther(w, r, "/dlq", fmt.Sprintf("Replayed %d dead letters.", len(res.Msg.GetTaskIds())))
}

// countDeadLetters counts the tenant's dead letters, up to 10,000.
func (s *Server) countDeadLetters(v *view) (int, bool, error) {
	n, token := 0, ""
	for n < 10_000 {
		res, err := s.clients.runs.ListDeadLetters(v.ctx, connect.NewRequest(&orreryv1.ListDeadLettersRequest{PageSize: 500, PageToken: token}))
		if err != nil {
			return 0, false, err
		}
		n += len(res.Msg.GetDeadLetters())
		if token = res.Msg.GetNextPageToken(); token == "" {
			return n, false, nil
		}
	}
	return n, true, nil
}
