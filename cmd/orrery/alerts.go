package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/internal/notify"
)

func (g *globals) alertClient() orreryv1connect.AlertServiceClient {
	return orreryv1connect.NewAlertServiceClient(g.httpClient(), g.baseURL())
}

func newAlertsCmd(g *globals) *cobra.Command {
	var jobName, namespace string
	var open bool
	var limit int
	cmd := &cobra.Command{
		Use:   "alerts",
		Short: "List the alerts of jobs with spec.alerts (missed, stuck, failure, dead_letter), newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("--limit: %d is not a positive number", limit)
			}
			req := &orreryv1.ListAlertsRequest{OpenOnly: open}
			if jobName != "" {
				req.Job = jobRef(jobName, namespace)
			} else {
				req.Namespace = namespace
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RAISED (UTC)\tKIND\tJOB\tSTATE\tMESSAGE")
			err := listPages(limit, func(size int32, token string) (int, string, error) {
				req.PageSize, req.PageToken = size, token
				res, err := g.alertClient().ListAlerts(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return 0, "", err
				}
				for _, a := range res.Msg.GetAlerts() {
					state := "open"
					if a.GetResolveTime() != nil {
						state = "resolved " + ts(a.GetResolveTime()) + ": " + a.GetResolution()
					}
					fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\n", ts(a.GetRaiseTime()), a.GetKind(), a.GetNamespace(), a.GetJob(), state, oneLine(a.GetMessage()))
				}
				return len(res.Msg.GetAlerts()), res.Msg.GetNextPageToken(), nil
			})
			if err != nil {
				return err
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.BoolVar(&open, "open", false, "only alerts not yet resolved")
	f.StringVar(&jobName, "job", "", "only this job's alerts: NAME (in --namespace) or an id")
	f.StringVarP(&namespace, "namespace", "n", "", "only this namespace's alerts (or the namespace of --job)")
	f.IntVar(&limit, "limit", 50, "show at most this many alerts")
	cmd.AddCommand(newNotificationsCmd(g))
	return cmd
}

func newNotificationsCmd(g *globals) *cobra.Command {
	var jobName, namespace, status string
	var limit int
	cmd := &cobra.Command{
		Use:   "notifications",
		Short: "List webhook notifications (run callbacks and alerts) with their delivery state, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("--limit: %d is not a positive number", limit)
			}
			req := &orreryv1.ListNotificationsRequest{Status: status}
			if jobName != "" {
				req.Job = jobRef(jobName, namespace)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CREATED (UTC)\tEVENT\tJOB\tURL\tSTATUS\tATTEMPTS\tLAST")
			err := listPages(limit, func(size int32, token string) (int, string, error) {
				req.PageSize, req.PageToken = size, token
				res, err := g.alertClient().ListNotifications(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return 0, "", err
				}
				for _, n := range res.Msg.GetNotifications() {
					last := n.GetLastError()
					if n.GetLastStatusCode() != 0 && last == "" {
						last = fmt.Sprintf("HTTP %d", n.GetLastStatusCode())
					}
					if notify.Status(n.GetStatus()) == notify.Pending && n.GetNextAttemptTime() != nil {
						last = strings.TrimSpace(last + " (next " + ts(n.GetNextAttemptTime()) + ")")
					}
					fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%d\t%s\n", ts(n.GetCreateTime()), n.GetEvent(), n.GetNamespace(), n.GetJob(), n.GetUrl(),
						n.GetStatus(), n.GetAttempts(), oneLine(last))
				}
				return len(res.Msg.GetNotifications()), res.Msg.GetNextPageToken(), nil
			})
			if err != nil {
				return err
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only pending, delivered or failed notifications")
	f.StringVar(&jobName, "job", "", "only this job's notifications: NAME (in --namespace) or an id")
	f.StringVarP(&namespace, "namespace", "n", "", "namespace of --job")
	f.IntVar(&limit, "limit", 50, "show at most this many")
	return cmd
}

// oneLine keeps a table cell on one line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}
