package webui

import (
	"net/http"

	"connectrpc.com/connect"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// alertsPage lists the alerts the viewer may see, newest first, open ones
// only or all (AlertService.ListAlerts), by namespace or job: each with
// its kind, its job and run, its message, and when and why it was
// resolved.
func (s *Server) alertsPage(w http.ResponseWriter, r *http.Request, v *view) error {
	q := r.URL.Query()
	req := &orreryv1.ListAlertsRequest{Namespace: q.Get("namespace"), OpenOnly: q.Get("state") != "all", PageToken: q.Get("page"), PageSize: 50}
	if job := q.Get("job"); job != "" {
		req.Job = &orreryv1.JobRef{Namespace: req.Namespace, Name: job}
		req.Namespace = ""
	}
	res, err := s.clients.alerts.ListAlerts(v.ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	cli := "orrery alerts"
	if req.OpenOnly {
		cli += " --open"
	}
	if ns := q.Get("namespace"); ns != "" {
		cli += " -n " + shellQuote(ns)
	}
	if job := q.Get("job"); job != "" {
		cli += " --job " + shellQuote(job)
	}
	s.render(w, r, v, http.StatusOK, "alerts", map[string]any{"Alerts": res.Msg.GetAlerts(), "All": !req.OpenOnly, "Q": q,
		"Next": nextPageURL("/alerts", q, res.Msg.GetNextPageToken()), "CLI": cli})
	return nil
}
