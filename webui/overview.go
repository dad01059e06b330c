package webui

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/internal/lifecycle"
)

// overviewGroup is a set of run statuses the overview's chart stacks as
// one segment: its name (the legend's and each segment's title), its
// CSS class, and its fill (a colour, and for the bad and the left-out a
// hatch or dots as well, so that colour is not the only signal).
type overviewGroup struct {
	Name, Class string
	Statuses    []lifecycle.RunStatus
}

var overviewGroups = []overviewGroup{
	{"succeeded", "ok", []lifecycle.RunStatus{lifecycle.RunSucceeded}},
	{"in progress", "run", []lifecycle.RunStatus{lifecycle.RunQueued, lifecycle.RunPending, lifecycle.RunRunning}},
	{"failed", "bad", []lifecycle.RunStatus{lifecycle.RunFailed, lifecycle.RunDeadLettered}},
	{"skipped or cancelled", "off", []lifecycle.RunStatus{lifecycle.RunSkipped, lifecycle.RunCancelled}},
}

// overviewBar is an hour of the chart: a segment per group, bottom up.
type overviewBar struct {
	At       time.Time
	X, W     float64
	Total    int32
	Segments []overviewSegment
}

type overviewSegment struct {
	Group overviewGroup
	Runs  int32
	Y, H  float64
}

// overviewPage is the home page: the last 24 hours of the runs the viewer
// may read at a glance (RunService.SummarizeRuns): runs per hour by
// status as a chart drawn here, the failing jobs, late instants, open
// alerts, queues and the slowest starts.
func (s *Server) overviewPage(w http.ResponseWriter, r *http.Request, v *view) error {
	q := r.URL.Query()
	ns := q.Get("namespace")
	var (
		sum     *orreryv1.SummarizeRunsResponse
		alerts  *orreryv1.ListAlertsResponse
		cluster *orreryv1.GetClusterResponse
	)
	g, ctx := errgroup.WithContext(v.ctx)
	g.Go(func() error {
		res, err := s.clients.runs.SummarizeRuns(ctx, connect.NewRequest(&orreryv1.SummarizeRunsRequest{Namespace: ns}))
		if err == nil {
			sum = res.Msg
		}
		return err
	})
	// The alerts and the queues are panels of their own: one that cannot
	// be read (the queue database down, a namespace the viewer may not
	// read alerts of) says so, and the page stands.
	var alertsErr, clusterErr error
	g.Go(func() error {
		res, err := s.clients.alerts.ListAlerts(ctx, connect.NewRequest(&orreryv1.ListAlertsRequest{Namespace: ns, OpenOnly: true, PageSize: 10}))
		if err == nil {
			alerts = res.Msg
		}
		alertsErr = err
		return nil
	})
	g.Go(func() error {
		res, err := s.clients.cluster.GetCluster(ctx, connect.NewRequest(&orreryv1.GetClusterRequest{}))
		if err == nil {
			cluster = res.Msg
		}
		clusterErr = err
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}

	type total struct {
		Group overviewGroup
		Runs  int32
	}
	tots := make([]total, len(overviewGroups))
	for i, grp := range overviewGroups {
		tots[i].Group = grp
	}
	var most, all int32
	hours := sum.GetHours()
	bars := make([]overviewBar, len(hours))
	bw := chartW / float64(max(len(hours), 1))
	for i, h := range hours {
		b := overviewBar{At: h.GetStartTime().AsTime(), X: float64(i) * bw, W: bw * 0.85}
		for gi, grp := range overviewGroups {
			var n int32
			for _, st := range grp.Statuses {
				n += h.GetByStatus()[string(st)]
			}
			tots[gi].Runs += n
			all += n
			b.Total += n
			b.Segments = append(b.Segments, overviewSegment{Group: grp, Runs: n})
		}
		most = max(most, b.Total)
		bars[i] = b
	}
	for i := range bars {
		y := chartH
		for j := range bars[i].Segments {
			sg := &bars[i].Segments[j]
			if most > 0 {
				sg.H = chartH * float64(sg.Runs) / float64(most)
			}
			y -= sg.H
			sg.Y = y
		}
	}
	queues := slices.Clone(cluster.GetQueues())
	slices.SortFunc(queues, func(a, b *orreryv1.QueueDepth) int {
		return cmp.Or(cmp.Compare(b.GetReady(), a.GetReady()), cmp.Compare(b.GetOldestReadySeconds(), a.GetOldestReadySeconds()))
	})
	if len(queues) > 10 {
		queues = queues[:10]
	}
	now := time.Now()
	runsLink := func(status string) string {
		u := url.Values{"status": {status}, "since": {sum.GetSince().AsTime().Format(time.RFC3339)}}
		if ns != "" {
			u.Set("namespace", ns)
		}
		return "/runs?" + u.Encode()
	}
	cli := "curl -H \"Authorization: Bearer $ORRERY_KEY\" \"$ORRERY_URL/api/v1/runs:summarize"
	if ns != "" {
		cli += "?namespace=" + url.QueryEscape(ns)
	}
	cli += "\""
	s.render(w, r, v, http.StatusOK, "overview", map[string]any{
		"S": sum, "NS": ns, "Bars": bars, "Most": most, "Totals": tots, "All": all, "Groups": overviewGroups,
		"ChartW": chartW, "ChartH": chartH, "Alerts": alerts.GetAlerts(), "Queues": queues, "CLI": cli,
		"Utilization": api.Utilization(cluster.GetWorkers()), "FailedRuns": runsLink("failed"), "SkippedRuns": runsLink("skipped"), "AlertsErr": errText(alertsErr), "QueuesErr": errText(clusterErr),
		"LateBy": func(ts *timestamppb.Timestamp) string { return duration(ts, timestamppb.New(now)) },
		"Age": func(sec float64) string {
			return fmt.Sprint((time.Duration(sec * float64(time.Second))).Round(time.Second))
		},
	})
	return nil
}

// referencePage renders the REST API's OpenAPI document with the vendored
// RapiDoc viewer (static/rapidoc-min.js): read only, no "try it".
func (s *Server) referencePage(w http.ResponseWriter, r *http.Request, v *view) error {
	w.Header().Set("Content-Security-Policy", csp(true)) // the viewer styles its elements inline
	s.render(w, r, v, http.StatusOK, "reference", map[string]any{"CLI": `curl -s "$ORRERY_URL/openapi.json"`})
	return nil
}

// errText is what a panel that could not be read says: the API's message.
func errText(err error) string {
	if err == nil {
		return ""
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}
