package webui

import (
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// forecastBar is one bar of the forecast chart: the runs of a bucket of
// minutes, with its place in the SVG.
type forecastBar struct {
	At         time.Time
	Runs       int32
	X, Y, W, H float64
}

// Chart geometry (SVG user units).
const (
	chartW, chartH = 960.0, 160.0
	chartBuckets   = 96
)

// forecastPage shows what the jobs in scope will fire over the next day
// (or the window asked for): runs per bucket of minutes as an SVG bar
// chart drawn here, and the hottest minutes with their jobs.
func (s *Server) forecastPage(w http.ResponseWriter, r *http.Request, v *view) error {
	q := r.URL.Query()
	from := time.Now().UTC().Truncate(time.Minute)
	if t, err := time.Parse(time.RFC3339, q.Get("from")); err == nil {
		from = t
	} else if q.Get("from") != "" {
		return badInput(fmt.Sprintf("from: %q is not an RFC 3339 instant", q.Get("from")))
	}
	hours := 24
	if h := q.Get("hours"); h != "" {
		if _, err := fmt.Sscanf(h, "%d", &hours); err != nil || hours < 1 || hours > 168 {
			return badInput("hours: a whole number from 1 to 168")
		}
	}
	to := from.Add(time.Duration(hours) * time.Hour)
	res, err := s.clients.pipeline.Forecast(v.ctx, connect.NewRequest(&orreryv1.ForecastRequest{Namespace: q.Get("ns"), Queue: q.Get("queue"),
		From: timestamppb.New(from), To: timestamppb.New(to), Top: 10}))
	if err != nil {
		return err
	}
	f := res.Msg
	bucket := to.Sub(from) / chartBuckets
	runs := make([]int32, chartBuckets)
	var most int32
	for _, m := range f.GetMinutes() {
		i := int(m.GetMinute().AsTime().Sub(from) / bucket)
		if i >= 0 && i < chartBuckets {
			runs[i] += m.GetRuns()
			most = max(most, runs[i])
		}
	}
	bars := make([]forecastBar, chartBuckets)
	bw := chartW / chartBuckets
	for i, n := range runs {
		h := 0.0
		if most > 0 {
			h = chartH * float64(n) / float64(most)
		}
		bars[i] = forecastBar{At: from.Add(time.Duration(i) * bucket), Runs: n, X: float64(i) * bw, Y: chartH - h, W: bw * 0.9, H: h}
	}
	cli := "orrery schedule forecast --from " + from.Format(time.RFC3339) + " --to " + to.Format(time.RFC3339)
	if ns := q.Get("ns"); ns != "" {
		cli += " -n " + shellQuote(ns)
	}
	if queue := q.Get("queue"); queue != "" {
		cli += " --queue " + shellQuote(queue)
	}
	s.render(w, r, v, http.StatusOK, "forecast", map[string]any{
		"F": f, "From": timestamppb.New(from), "To": timestamppb.New(to), "NS": q.Get("ns"), "Queue": q.Get("queue"), "Hours": hours,
		"Bars": bars, "Most": most, "Bucket": bucket, "ChartW": chartW, "ChartH": chartH, "CLI": cli,
		"Demand": api.DemandByQueue(f.GetHours()),
	})
	return nil
}
