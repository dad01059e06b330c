package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag/schedule"
)

func (g *globals) auditClient() orreryv1connect.AuditServiceClient {
	return orreryv1connect.NewAuditServiceClient(g.httpClient(), g.baseURL())
}

func newAuditCmd(g *globals) *cobra.Command {
	var actor, action, kind, target, namespace, since, until string
	var limit int
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List the audit trail (who changed what, and which fields), newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("--limit: %d is not a positive number", limit)
			}
			req := &orreryv1.ListAuditRequest{Actor: actor, Action: action, TargetKind: kind}
			if target != "" {
				req.TargetId, req.TargetName = auditTarget(target, namespace)
			}
			var err error
			if req.Since, err = instantFlag("since", since); err != nil {
				return err
			}
			if req.Until, err = instantFlag("until", until); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AT (UTC)\tACTOR\tACTION\tTARGET\tCHANGES")
			err = listPages(limit, func(size int32, token string) (int, string, error) {
				req.PageSize, req.PageToken = size, token
				res, err := g.auditClient().ListAudit(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return 0, "", err
				}
				for _, e := range res.Msg.GetEntries() {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ts(e.GetTime()), e.GetActor(), e.GetAction(), auditTargetText(e), changesText(e))
				}
				return len(res.Msg.GetEntries()), res.Msg.GetNextPageToken(), nil
			})
			if err != nil {
				return err
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&actor, "actor", "", "only changes made by this principal (with any of its keys), or by this exact actor as shown")
	f.StringVar(&action, "action", "", "only this action (create, update, pause, resume, delete, trigger, cancel, replay)")
	f.StringVar(&kind, "kind", "", "only targets of this kind (job, run, dead_letters)")
	f.StringVar(&target, "target", "", "only this target: a job's NAME (in --namespace), NAMESPACE/NAME, or an id")
	f.StringVarP(&namespace, "namespace", "n", "default", "namespace of a --target NAME")
	f.StringVar(&since, "since", "", "only changes at or after this RFC 3339 instant")
	f.StringVar(&until, "until", "", "only changes before this RFC 3339 instant")
	f.IntVar(&limit, "limit", 50, "show at most this many entries")
	return cmd
}

// auditTarget turns --target into the request's target id or name.
func auditTarget(target, namespace string) (id, name string) {
	if _, err := uuid.Parse(target); err == nil {
		return target, ""
	}
	if strings.Contains(target, "/") {
		return "", target
	}
	return "", namespace + "/" + target
}

// instantFlag parses an RFC 3339 flag ("" is unset) and checks it is
// within what the server accepts, so a bad one fails before any call.
func instantFlag(name, v string) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, fmt.Errorf("--%s: %q is not an RFC 3339 instant such as 2026-03-08T00:00:00Z", name, v)
	}
	if err := schedule.CheckInstant(t); err != nil {
		return nil, errors.New("--" + name + ": " + err.Error())
	}
	return timestamppb.New(t), nil
}

func auditTargetText(e *orreryv1.AuditEntry) string {
	name := e.GetTargetName()
	if name == "" {
		name = e.GetTargetId()
	}
	return e.GetTargetKind() + " " + name
}

// changesText is the changed fields of an entry with both sides; a
// create, a trigger or a cancel has only one side, and the action says it
// all: "-".
func changesText(e *orreryv1.AuditEntry) string {
	if a := e.GetAction(); a == "approve" || a == "reject" { // a decision: its step and comment
		var d struct{ Step, Comment string }
		_ = json.Unmarshal([]byte(e.GetAfter()), &d)
		return fmt.Sprintf("step %s: %q", d.Step, d.Comment)
	}
	if e.GetBefore() == "" || e.GetAfter() == "" || len(e.GetChanges()) == 0 {
		return "-"
	}
	paths := make([]string, len(e.GetChanges()))
	for i, c := range e.GetChanges() {
		paths[i] = c.GetPath()
	}
	return strings.Join(paths, ", ")
}

// listPages calls page with page sizes of at most 500 and each page's
// token, until the server has no next page or limit rows were shown; page
// prints its rows and returns how many and the next page's token.
func listPages(limit int, page func(size int32, token string) (int, string, error)) error {
	token := ""
	for shown := 0; ; {
		n, next, err := page(int32(min(limit-shown, 500)), token)
		if err != nil {
			return err
		}
		shown += n
		if token = next; token == "" || shown >= limit {
			return nil
		}
	}
}
