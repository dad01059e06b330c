package main

import (
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag/schedule"
)

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "Work with schedules"}
	var cron, tz, at, from string
	var n int32
	preview := &cobra.Command{
		Use:   "preview --cron EXPR [--tz ZONE] [--from RFC3339] [-n N] | --at RFC3339",
		Short: "Print the next N fire instants after FROM, one per line, RFC 3339 in UTC",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cron == "" && at == "" {
				return errors.New("give --cron EXPR or --at RFC3339")
			}
			req := &orreryv1.PreviewScheduleRequest{Schedule: &orreryv1.Schedule{Cron: cron, Timezone: tz, At: at}, Count: n}
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
			for _, t := range res.Msg.GetFireTimes() {
				fmt.Fprintln(cmd.OutOrStdout(), t.AsTime().UTC().Format(time.RFC3339))
			}
			return nil
		},
	}
	f := preview.Flags()
	f.StringVar(&cron, "cron", "", "cron expression: 5 fields, 6 with seconds, @daily, @every 90s")
	f.StringVar(&tz, "tz", "", "IANA time zone of the cron expression (default UTC)")
	f.StringVar(&at, "at", "", "one-time instant, RFC 3339")
	f.StringVar(&from, "from", "", "compute instants after this RFC 3339 instant (default: now)")
	f.Int32VarP(&n, "count", "n", 10, "how many instants (at most 1000)")
	cmd.AddCommand(preview)
	return cmd
}
