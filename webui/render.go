package webui

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/lifecycle"
)

//go:embed templates
var templateFS embed.FS

// pages are the parsed templates, one set per page (each with base.html).
type pages map[string]*template.Template

var pageNames = []string{"login", "error", "jobs", "job", "run", "dlq", "cluster", "audit", "forecast", "alerts", "runs", "overview", "reference"}

var funcs = template.FuncMap{
	"gridMark": func(status string) string {
		if m, ok := gridMarks[lifecycle.TaskStatus(status)]; ok {
			return m
		}
		return "·" // a run pending or queued
	},
	"ts":      timeHTML,
	"ahead":   func(ts *timestamppb.Timestamp) bool { return ts != nil && ts.AsTime().After(time.Now()) },
	"tsIn":    timeIn,
	"dur":     duration,
	"reader":  func() access.Role { return access.Reader },
	"editor":  func() access.Role { return access.Editor },
	"admin":   func() access.Role { return access.Admin },
	"can":     func(v *view, role access.Role, ns, name string) bool { return v != nil && v.can(role, ns, name) },
	"tenantA": func(v *view) bool { return v != nil && v.P.Role.Allows(access.Admin) },
	"n":       coord,
	"add":     func(a, b float64) float64 { return a + b },
	"half":    func(a float64) float64 { return a / 2 },
	"counts":  itemCounts,
	"handled": backfillHandled,
	"usage":   api.ResourceUsage,
	"asks":    api.ResourcesText,
	"demand":  api.DemandText,
	"pct":     func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
}

func parsePages() (pages, error) {
	out := pages{}
	for _, name := range pageNames {
		t, err := template.New("base.html").Funcs(funcs).ParseFS(templateFS, "templates/base.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("webui: template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// render writes a page. data is the page's own; V (the view, nil when
// signed out) and Flash (a message after a redirect) are added.
func (s *Server) render(w http.ResponseWriter, r *http.Request, v *view, status int, name string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["V"] = v
	data["Flash"] = takeFlash(w, r)
	data["Page"] = name
	data["AuthOff"] = s.cfg.AuthOff
	var buf bytes.Buffer
	page, ok := s.pages[name]
	if !ok {
		s.log.ErrorContext(r.Context(), "web ui: render: no such page", "page", name)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	if err := page.Execute(&buf, data); err != nil {
		s.log.ErrorContext(r.Context(), "web ui: render", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store") // pages carry CSRF tokens and tenant data
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// timeHTML is an instant as a <time> element: UTC as text (and on
// hover); app.js rewrites the text in the viewer's zone.
func timeHTML(ts *timestamppb.Timestamp) template.HTML {
	if ts == nil {
		return "—"
	}
	t := ts.AsTime().UTC()
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`,
		t.Format(time.RFC3339Nano), t.Format("2006-01-02 15:04:05 UTC"), t.Format("2006-01-02 15:04:05 UTC")))
}

// timeIn is an instant in a named zone (a job's), or UTC.
func timeIn(ts *timestamppb.Timestamp, zone string) string {
	if ts == nil {
		return "—"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "" {
		loc = time.UTC
	}
	return ts.AsTime().In(loc).Format("2006-01-02 15:04:05 MST")
}

// duration is end - start, rounded; "" when either is unset.
func duration(start, end *timestamppb.Timestamp) string {
	if start == nil || end == nil {
		return ""
	}
	d := end.AsTime().Sub(start.AsTime())
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
