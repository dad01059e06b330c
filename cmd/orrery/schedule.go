package main

import (
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag/schedule"
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
	cmd.AddCommand(preview)
	return cmd
}
