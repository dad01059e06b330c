package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/forecast"
)

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "Work with schedules"}
	var crons, exDates, exCrons []string
	var tz, at, from, start, end, jitter, file string
	var n int32
	preview := &cobra.Command{
		Use:   "preview --cron EXPR [--cron EXPR...] [--tz ZONE] [--start T] [--end T] [--jitter D] [--exclude-date D] [--exclude-cron EXPR] [--from RFC3339] [-n N] | --at RFC3339 | -f JOB.yaml",
		Short: "Print the next N fire instants after FROM, one per line, RFC 3339 in UTC",
		Long: `preview prints the next N instants of a schedule after FROM (default now),
one per line, RFC 3339 in UTC. An instant that fires later by its jitter
says when it fires; one that an exclusion removes says which, and does not
count towards N. With -f, the schedule of the job in the file (the first
document), with its jitter drawn for that job's namespace and name, as the
scheduler will fire it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &orreryv1.PreviewScheduleRequest{Count: n}
			switch {
			case file != "":
				if len(crons) > 0 || at != "" {
					return errors.New("give -f FILE or the schedule's flags, not both")
				}
				docs, err := readResources(file)
				if err != nil {
					return err
				}
				r := docs[0].Resource
				req.Schedule, req.Namespace, req.Name = api.ScheduleToProto(r.Spec.Schedule), r.Metadata.Namespace, r.Metadata.Name
			case len(crons) == 0 && at == "":
				return errors.New("give --cron EXPR, --at RFC3339 or -f FILE")
			default:
				spec := schedule.Spec{Cron: crons, Timezone: tz, At: at, Start: start, End: end}
				if jitter != "" {
					d, err := time.ParseDuration(jitter)
					if err != nil {
						return fmt.Errorf("--jitter: %q is not a duration such as 30s", jitter)
					}
					spec.Jitter = schedule.D(d)
				}
				if len(exDates) > 0 || len(exCrons) > 0 {
					spec.Exclude = &schedule.Exclude{Dates: exDates, Cron: exCrons}
				}
				req.Schedule = api.ScheduleToProto(spec)
			}
			if from != "" {
				t, err := time.Parse(time.RFC3339, from)
				if err != nil {
					return fmt.Errorf("--from: %q is not an RFC 3339 instant such as 2026-03-08T00:00:00Z", from)
				}
				if err := schedule.CheckInstant(t); err != nil {
					return fmt.Errorf("--from: %w", err)
				}
				req.From = timestamppb.New(t)
			}
			res, err := g.jobClient().PreviewSchedule(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			for _, p := range res.Msg.GetInstants() {
				line := p.GetInstant().AsTime().UTC().Format(time.RFC3339)
				switch {
				case p.GetExcluded() != "":
					line += "  " + p.GetExcluded()
				case !p.GetFireTime().AsTime().Equal(p.GetInstant().AsTime()):
					line += fmt.Sprintf("  fires %s (jitter +%s)", p.GetFireTime().AsTime().UTC().Format(time.RFC3339),
						p.GetFireTime().AsTime().Sub(p.GetInstant().AsTime()))
				}
				fmt.Fprintln(cmd.OutOrStdout(), line)
			}
			return nil
		},
	}
	f := preview.Flags()
	f.StringArrayVar(&crons, "cron", nil, "cron expression: 5 fields, 6 with seconds, @daily, @every 90s (repeat: their union)")
	f.StringVar(&tz, "tz", "", "IANA time zone of the cron expression (default UTC)")
	f.StringVar(&at, "at", "", "one-time instant, RFC 3339")
	f.StringVar(&start, "start", "", "no instant before this RFC 3339 instant")
	f.StringVar(&end, "end", "", "no instant after this RFC 3339 instant")
	f.StringVar(&jitter, "jitter", "", "delay each instant by up to this duration (drawn for the job of -f, else for an unnamed one)")
	f.StringArrayVar(&exDates, "exclude-date", nil, "a day (YYYY-MM-DD, in the zone) on which nothing fires (repeat)")
	f.StringArrayVar(&exCrons, "exclude-cron", nil, "a cron expression whose matches do not fire (repeat)")
	f.StringVarP(&file, "file", "f", "", "preview the schedule of the job in this YAML file")
	f.StringVar(&from, "from", "", "compute instants after this RFC 3339 instant (default: now)")
	f.Int32VarP(&n, "count", "n", 10, "how many instants (at most 1000)")
	cmd.AddCommand(preview, newForecastCmd(g))
	return cmd
}

func newForecastCmd(g *globals) *cobra.Command {
	var path, namespace, from, to, queue string
	var top int32
	cmd := &cobra.Command{
		Use:   "forecast [-f DIR | --namespace NS] [--queue Q] [--from T] [--to T] [--top N]",
		Short: "Count the runs jobs will fire per minute over a window, the hottest minutes, and the hours their queues will be short of capacity",
		Long: `forecast counts, minute by minute, the runs the active jobs will fire from
--from (default now) to --to (default 24 hours later, at most 7 days), with
their jitter, exclusions and bounds, as the scheduler fires them: the
total, the tasks by queue, the busiest hours, and the hottest minutes with
the jobs that make them. With -f, the jobs of a YAML file or folder,
computed here without a server; else the server's jobs (of --namespace, or
every one you may read). --queue counts only the steps that go to one
queue, and the jobs that have one.

From the server it also sets, per queue and hour, what the steps will ask
for on average at once (each step's resources for the median length of its
attempts over its job's last 50 runs, a minute when it has none, from when
the steps it needs have ended) against what the queue's live workers
declare, and names the hours where demand passes capacity and the jobs
that make them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			start := time.Now().Truncate(time.Minute)
			if from != "" {
				t, err := time.Parse(time.RFC3339, from)
				if err != nil {
					return fmt.Errorf("--from: %q is not an RFC 3339 instant", from)
				}
				start = t
			}
			end := start.Add(24 * time.Hour)
			if to != "" {
				t, err := time.Parse(time.RFC3339, to)
				if err != nil {
					return fmt.Errorf("--to: %q is not an RFC 3339 instant", to)
				}
				end = t
			}
			var res *orreryv1.ForecastResponse
			local := false // the capacity forecast needs the server's history and fleet
			if path != "" {
				if namespace != "" {
					return errors.New("give -f DIR or --namespace NS, not both")
				}
				files, err := yamlFiles(path)
				if err != nil {
					return err
				}
				var jobs []forecast.Job
				for _, f := range files {
					docs, err := readResources(f)
					if err != nil {
						return err
					}
					for _, d := range docs {
						r := d.Resource
						jobs = append(jobs, forecast.Job{Namespace: r.Metadata.Namespace, Name: r.Metadata.Name, Spec: r.Spec})
					}
				}
				n := int(top)
				if n == 0 {
					n = 5
				}
				jobs = forecast.InQueue(jobs, queue)
				f, err := forecast.Compute(jobs, start, end, n)
				if err != nil {
					return fmt.Errorf("forecast: %w", err)
				}
				res = api.ForecastToProto(f, len(jobs))
				local = true
			} else {
				r, err := orreryv1connect.NewPipelineServiceClient(g.httpClient(), g.baseURL()).Forecast(cmd.Context(), connect.NewRequest(&orreryv1.ForecastRequest{
					Namespace: namespace, Queue: queue, From: timestamppb.New(start), To: timestamppb.New(end), Top: top}))
				if err != nil {
					return err
				}
				res = r.Msg
			}
			printForecast(cmd.OutOrStdout(), res, start, end)
			if local {
				fmt.Fprintln(cmd.OutOrStdout(), "\ncapacity: the server's forecast (without -f) sets demand against the workers' capacity")
			} else {
				printCapacity(cmd.OutOrStdout(), res)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&path, "file", "f", "", "the jobs of a YAML file, or a folder searched for *.yaml and *.yml (no server)")
	f.StringVarP(&namespace, "namespace", "n", "", "the server's jobs of one namespace")
	f.StringVar(&from, "from", "", "the window's start, RFC 3339 (default: now)")
	f.StringVar(&to, "to", "", "the window's end, RFC 3339 (default: 24 hours after --from; at most 7 days)")
	f.Int32Var(&top, "top", 5, "how many of the hottest minutes to name (at most 50)")
	f.StringVar(&queue, "queue", "", "count only the steps that go to this queue, and the jobs that have one")
	return cmd
}

func printForecast(w io.Writer, f *orreryv1.ForecastResponse, from, to time.Time) {
	fmt.Fprintf(w, "%d runs from %d jobs between %s and %s\n", f.GetRuns(), f.GetJobs(), from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	if q := f.GetTasksByQueue(); len(q) > 0 {
		fmt.Fprintf(w, "tasks by queue: %s\n", queueCounts(q))
	}
	hours := map[time.Time]int32{}
	var order []time.Time
	for _, m := range f.GetMinutes() {
		h := m.GetMinute().AsTime().UTC().Truncate(time.Hour)
		if _, ok := hours[h]; !ok {
			order = append(order, h)
		}
		hours[h] += m.GetRuns()
	}
	if len(order) > 0 {
		fmt.Fprintln(w, "\nruns by hour (UTC):")
		var most int32
		for _, h := range order {
			most = max(most, hours[h])
		}
		for _, h := range order {
			bar := strings.Repeat("#", int(1+39*int64(hours[h])/int64(max(most, 1))))
			fmt.Fprintf(w, "  %s  %7d  %s\n", h.Format("2006-01-02T15Z"), hours[h], bar)
		}
	}
	if len(f.GetHottest()) > 0 {
		fmt.Fprintln(w, "\nhottest minutes:")
		for _, m := range f.GetHottest() {
			var jobs []string
			for _, j := range m.GetJobs() {
				jobs = append(jobs, fmt.Sprintf("%s (%d)", j.GetJob(), j.GetRuns()))
			}
			fmt.Fprintf(w, "  %s  %d runs  [%s]  %s\n", m.GetMinute().AsTime().UTC().Format("2006-01-02T15:04Z"), m.GetRuns(),
				queueCounts(m.GetTasksByQueue()), strings.Join(jobs, ", "))
		}
	}
}

// printCapacity prints the capacity forecast: per queue its peak hour,
// then each short hour with the jobs that make it.
func printCapacity(w io.Writer, f *orreryv1.ForecastResponse) {
	queues := api.DemandByQueue(f.GetHours())
	if len(queues) == 0 {
		fmt.Fprintln(w, "\ncapacity: no step in the window asks for resources")
		return
	}
	fmt.Fprintln(w, "\ndemand against capacity, on average at once (UTC hours):")
	if n := f.GetUnmeasuredSteps(); n > 0 {
		fmt.Fprintf(w, "  (steps with no attempts yet, counted as a minute each: %d)\n", n)
	}
	for _, q := range queues {
		fmt.Fprintf(w, "  %s: %d of %d hours short; peak %s  %s\n", q.Queue, len(q.Short), q.Hours,
			q.Peak.GetHour().AsTime().UTC().Format("2006-01-02T15Z"), api.DemandText(q.Peak))
		for _, h := range q.Short {
			var jobs []string
			for _, j := range h.GetJobs() {
				jobs = append(jobs, j.GetJob()+" ("+api.ResourcesText(j.GetDemand())+")")
			}
			fmt.Fprintf(w, "    SHORT of %s %s  %s  by %s\n", strings.Join(h.GetShort(), ", "), h.GetHour().AsTime().UTC().Format("2006-01-02T15Z"),
				api.DemandText(h), strings.Join(jobs, ", "))
		}
	}
}

func queueCounts(q map[string]int32) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(q)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, q[k]))
	}
	return strings.Join(parts, " ")
}
