package webui

import (
	"net/http"

	"connectrpc.com/connect"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// auditPage lists the audit trail, newest first, filtered by actor,
// action and target kind, with each entry's field-level changes.
func (s *Server) auditPage(w http.ResponseWriter, r *http.Request, v *view) error {
	q := r.URL.Query()
	req := &orreryv1.ListAuditRequest{Actor: q.Get("actor"), Action: q.Get("action"), TargetKind: q.Get("kind"),
		TargetName: q.Get("target"), PageToken: q.Get("page"), PageSize: 50}
	res, err := s.clients.audit.ListAudit(v.ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	next := nextPageURL("/audit", q, res.Msg.GetNextPageToken())
	cli := "orrery audit"
	for _, f := range []struct{ flag, v string }{{"--actor", req.Actor}, {"--action", req.Action}, {"--kind", req.TargetKind}} {
		if f.v != "" {
			cli += " " + f.flag + " " + shellQuote(f.v)
		}
	}
	s.render(w, r, v, http.StatusOK, "audit", map[string]any{"Entries": res.Msg.GetEntries(), "Next": next, "Q": q, "CLI": cli})
	return nil
}
