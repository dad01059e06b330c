package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/lifecycle"
)

func (g *globals) runClient() orreryv1connect.RunServiceClient {
	return orreryv1connect.NewRunServiceClient(g.httpClient(), g.baseURL())
}

func (g *globals) clusterClient() orreryv1connect.ClusterServiceClient {
	return orreryv1connect.NewClusterServiceClient(g.httpClient(), g.baseURL())
}

func ts(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

func newRunsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "List, inspect and cancel runs"}
	var jobName, namespace, status, trigger, since, until string
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest scheduled instant first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &orreryv1.ListRunsRequest{Status: status, Trigger: trigger, PageSize: int32(min(limit, 500))}
			if jobName != "" {
				req.Job = jobRef(jobName, namespace)
			} else {
				req.Namespace = namespace
			}
			for _, b := range []struct {
				flag, text string
				to         **timestamppb.Timestamp
			}{{"--since", since, &req.Since}, {"--until", until, &req.Until}} {
				if b.text == "" {
					continue
				}
				t, err := time.Parse(time.RFC3339, b.text)
				if err != nil {
					return fmt.Errorf("%s: %q is not an RFC 3339 time such as 2026-12-01T00:00:00Z", b.flag, b.text)
				}
				*b.to = timestamppb.New(t)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tJOB\tSCHEDULED (UTC)\tTRIGGER\tSTATUS\tREASON")
			shown := 0
			for {
				res, err := g.runClient().ListRuns(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				for _, r := range res.Msg.GetRuns() {
					fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%s\t%s\n", r.GetId(), r.GetNamespace(), r.GetJob(), ts(r.GetScheduledTime()), r.GetTrigger(), r.GetStatus(), r.GetReason())
					shown++
				}
				if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" || shown >= limit {
					return tw.Flush()
				}
			}
		},
	}
	list.Flags().StringVar(&jobName, "job", "", "only runs of this job (name or id)")
	list.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace of --job; without --job, only runs of jobs in it")
	list.Flags().StringVar(&status, "status", "", "only runs in this status")
	list.Flags().StringVar(&trigger, "trigger", "", "only runs of this trigger: schedule, backfill, manual, upstream, parent, event")
	list.Flags().StringVar(&since, "since", "", "only runs whose instant is at or after this RFC 3339 time")
	list.Flags().StringVar(&until, "until", "", "only runs whose instant is before this RFC 3339 time")
	list.Flags().IntVar(&limit, "limit", 50, "show at most this many runs")

	var itemsOf string
	var itemsFrom int32
	get := &cobra.Command{
		Use:   "get RUN_ID",
		Short: "Show a run with its tasks and attempts (a fan-out's items counted; --items lists them)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.runClient().GetRun(cmd.Context(), connect.NewRequest(&orreryv1.GetRunRequest{Id: args[0], ItemsOf: itemsOf, ItemsFrom: itemsFrom}))
			if err != nil {
				return err
			}
			r := res.Msg.GetRun()
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "run %s of %s/%s (version %d)\n  scheduled %s  trigger %s  status %s", r.GetId(), r.GetNamespace(), r.GetJob(), r.GetJobVersion(), ts(r.GetScheduledTime()), r.GetTrigger(), r.GetStatus())
			if r.GetReason() != "" {
				fmt.Fprintf(w, " (%s)", r.GetReason())
			}
			fmt.Fprintf(w, "\n  started %s  finished %s\n", ts(r.GetStartTime()), ts(r.GetFinishTime()))
			if u := r.GetUpstream().AsMap(); len(u) > 0 {
				fmt.Fprintf(w, "  started by the end of run %v of %v/%v (%v)\n", u["id"], u["namespace"], u["job"], u["outcome"])
			}
			if r.GetParentRunId() != "" {
				fmt.Fprintf(w, "  started by step %s of run %s\n", r.GetParentStep(), r.GetParentRunId())
			}
			if r.GetTriggeredBy() != "" {
				fmt.Fprintf(w, "  triggered by %s\n", r.GetTriggeredBy())
			}
			if k := r.GetConcurrencyKeys(); len(k) > 0 {
				fmt.Fprintf(w, "  concurrency keys %s\n", printable(strings.Join(k, ", ")))
			}
			if r.DebounceKey != nil {
				fmt.Fprintln(w, "  "+debounceLine(r))
			}
			if e := r.GetEvent().AsMap(); len(e) > 0 {
				data, _ := json.Marshal(e["data"])
				from := ""
				if src, _ := e["source"].(string); src != "" {
					from = " from source " + src
				}
				fmt.Fprintf(w, "  started by event %v of type %v%s at %v: %s\n", e["id"], e["type"], from, e["time"], dag.Clip(string(data), 300))
			}
			if p := r.GetParams(); p != nil {
				b, _ := protojson.Marshal(p)
				var compact bytes.Buffer
				_ = json.Compact(&compact, b)
				fmt.Fprintf(w, "  params %s\n", compact.String())
			}
			for _, t := range append(res.Msg.GetTasks(), res.Msg.GetItems()...) {
				fmt.Fprintf(w, "task %s  %s  queue %s  attempts %d", t.GetStep(), t.GetStatus(), t.GetQueue(), t.GetAttempt())
				if r := t.GetResources(); r != nil {
					fmt.Fprintf(w, "  needs %s", api.ResourcesText(r))
				}
				if c := t.GetItems(); c != nil {
					fmt.Fprintf(w, "  items %d (%s; %d must succeed)", c.GetTotal(), itemCounts(c), c.GetNeeded())
				}
				if c := t.GetChildRunId(); c != "" {
					fmt.Fprintf(w, "  child run %s", c)
				}
				if k := t.GetConcurrencyKeys(); len(k) > 0 {
					fmt.Fprintf(w, "  keys %s", strings.Join(k, ", "))
				}
				if k := t.GetRateKey(); k != "" {
					fmt.Fprintf(w, "  rate key %s", k)
				}
				switch {
				case t.GetWaitReason() != "" && t.GetStatus() == "running": // a parked step
					fmt.Fprintf(w, "  parked: %s", t.GetWaitReason())
				case t.GetWaitReason() != "" && (t.GetStatus() == "waiting" || t.GetReadyTime().AsTime().After(time.Now())): // held by a step key, or not eligible yet (a retry's backoff, a rate limit's token)
					fmt.Fprintf(w, "  waiting: %s", t.GetWaitReason())
				case t.GetWaitReason() != "":
					fmt.Fprintf(w, "  waiting for admission since %s: %s", ts(t.GetReadyTime()), t.GetWaitReason())
				}
				if len(t.GetAttempts()) == 0 && t.GetLastError() != "" { // skipped, or its condition failed
					fmt.Fprintf(w, "  (%s)", t.GetLastError())
				}
				fmt.Fprintln(w)
				if a := t.GetApproval(); a != nil {
					printApproval(w, r.GetId(), t.GetStep(), a)
				}
				for _, a := range t.GetAttempts() {
					fmt.Fprintf(w, "  attempt %d on %s  %s → %s  %s", a.GetNumber(), a.GetWorker(), ts(a.GetStartTime()), ts(a.GetFinishTime()), a.GetOutcome())
					if a.GetExitReason() != "" {
						fmt.Fprintf(w, " (%s, %s)", a.GetExitReason(), a.GetFailureClass())
					}
					if a.GetError() != "" {
						fmt.Fprintf(w, ": %s", a.GetError())
					}
					if a.GetLateOutcome() != "" {
						fmt.Fprintf(w, "  [late report rejected: %s %s]", a.GetLateOutcome(), a.GetLateError())
					}
					fmt.Fprintln(w)
					if out := strings.TrimSpace(a.GetOutput()); out != "" {
						cut := ""
						if a.GetOutputTruncated() {
							cut = " (cut at 64 KiB)"
						}
						fmt.Fprintf(w, "    output%s: %s\n", cut, strings.ReplaceAll(out, "\n", "\n            "))
					}
					if log := strings.TrimSpace(a.GetLog()); log != "" {
						fmt.Fprintf(w, "    log: %s\n", strings.ReplaceAll(log, "\n", "\n         "))
					}
				}
			}
			return nil
		},
	}
	get.Flags().StringVar(&itemsOf, "items", "", "list the items of this fan-out step (for_each), at most 500")
	get.Flags().Int32Var(&itemsFrom, "items-from", 0, "with --items: from this item index")
	var reason string
	cancel := &cobra.Command{
		Use:   "cancel RUN_ID",
		Short: "Cancel a run's queued and running tasks",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.runClient().CancelRun(cmd.Context(), connect.NewRequest(&orreryv1.CancelRunRequest{Id: args[0], Reason: reason}))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s %s\n", res.Msg.GetRun().GetId(), res.Msg.GetRun().GetStatus())
			return nil
		},
	}
	cancel.Flags().StringVar(&reason, "reason", "", "why (kept on the run and in the audit trail)")
	var ignoreOverlap bool
	retry := &cobra.Command{
		Use:   "retry RUN_ID",
		Short: "Run a failed or cancelled run again from where it failed (succeeded steps keep their outputs)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.runClient().RetryRun(cmd.Context(), connect.NewRequest(&orreryv1.RetryRunRequest{Id: args[0], IgnoreOverlap: ignoreOverlap}))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s %s\n", res.Msg.GetRun().GetId(), res.Msg.GetRun().GetStatus())
			return nil
		},
	}
	retry.Flags().BoolVar(&ignoreOverlap, "ignore-overlap", false, "retry even if the job's overlap policy would hold it back")
	cmd.AddCommand(list, get, cancel, retry, decideCmd(g, true), decideCmd(g, false))
	return cmd
}

// decideCmd is `runs approve` (approve) or `runs reject`.
func decideCmd(g *globals, approve bool) *cobra.Command {
	verb, short := "approve", "Approve a step that asks for an approval (its count of approvals from distinct principals ends it)"
	if !approve {
		verb, short = "reject", "Reject a step that asks for an approval (it fails)"
	}
	var comment string
	cmd := &cobra.Command{
		Use:   verb + " RUN_ID STEP",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var t *orreryv1.Task
			if approve {
				res, err := g.runClient().ApproveStep(cmd.Context(), connect.NewRequest(&orreryv1.ApproveStepRequest{Id: args[0], Step: args[1], Comment: comment}))
				if err != nil {
					return err
				}
				t = res.Msg.GetTask()
			} else {
				res, err := g.runClient().RejectStep(cmd.Context(), connect.NewRequest(&orreryv1.RejectStepRequest{Id: args[0], Step: args[1], Comment: comment}))
				if err != nil {
					return err
				}
				t = res.Msg.GetTask()
			}
			fmt.Fprintf(cmd.OutOrStdout(), "step %s of run %s %s", t.GetStep(), args[0], t.GetStatus())
			if a := t.GetApproval(); a != nil {
				fmt.Fprintf(cmd.OutOrStdout(), " (%s)", t.GetWaitReason())
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().StringVar(&comment, "comment", "", "why (kept with the decision, in the step's output and the audit trail; at most 1 KiB)")
	return cmd
}

// printable is s with its control characters (a line break, a
// terminal's escape) shown as U+FFFD: text from events and people printed
// so that it cannot move the cursor or fake a line.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}

// printApproval shows what a parked approval asks, the decisions so far,
// and how to decide.
func printApproval(w io.Writer, run, step string, a *orreryv1.PendingApproval) {
	if a.GetMessage() != "" {
		fmt.Fprintf(w, "  asks: %s\n", printable(a.GetMessage()))
	}
	who := "role " + a.GetRole()
	if len(a.GetPrincipals()) > 0 {
		who += " and one of " + strings.Join(a.GetPrincipals(), ", ")
	}
	if a.GetSeparate() && a.GetTriggeredBy() != "" {
		who += ", not " + a.GetTriggeredBy()
	}
	fmt.Fprintf(w, "  %d approval(s) from %s; at its timeout (%s) it will %s\n", a.GetCount(), who, ts(a.GetTimeoutTime()), a.GetOnTimeout())
	for _, d := range a.GetDecisions() {
		fmt.Fprintf(w, "  %sd by %s at %s", d.GetDecision(), d.GetPrincipal(), ts(d.GetTime()))
		if d.GetComment() != "" {
			fmt.Fprintf(w, ": %s", printable(d.GetComment()))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  decide: orrery runs approve %s %s --comment ... (or reject)\n", run, step)
}

func newTriggerCmd(g *globals, namespace *string) *cobra.Command {
	var key string
	var force bool
	var params []string
	cmd := &cobra.Command{
		Use:   "trigger NAME|ID",
		Short: "Run a job now (its overlap policy applies unless --ignore-overlap)",
		Long: "Run a job now (its overlap policy applies unless --ignore-overlap).\n\n" +
			"--param NAME=VALUE gives a param (repeat it for more): a string param takes VALUE as it is,\n" +
			"the others read it as JSON (--param limit=3, --param dry_run=true, --param days='[\"mon\"]').\n" +
			"The job's defaults fill in the rest.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			texts := map[string]string{}
			for _, p := range params {
				k, v, ok := strings.Cut(p, "=")
				if !ok || k == "" {
					return fmt.Errorf("--param %q: write NAME=VALUE", p)
				}
				if _, twice := texts[k]; twice {
					return fmt.Errorf("--param %s: given twice", k)
				}
				texts[k] = v
			}
			res, err := g.runClient().TriggerJob(cmd.Context(), connect.NewRequest(&orreryv1.TriggerJobRequest{Job: jobRef(args[0], *namespace), IdempotencyKey: key, IgnoreOverlap: force, ParamTexts: texts}))
			if err != nil {
				return err
			}
			r := res.Msg.GetRun()
			fmt.Fprintf(cmd.OutOrStdout(), "run %s %s", r.GetId(), r.GetStatus())
			if r.GetReason() != "" {
				fmt.Fprintf(cmd.OutOrStdout(), " (%s)", r.GetReason())
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "idempotency-key", "", "a replay with this key returns the first run")
	cmd.Flags().BoolVar(&force, "ignore-overlap", false, "run even if the overlap policy would skip or queue it")
	cmd.Flags().StringArrayVar(&params, "param", nil, "a param, NAME=VALUE (repeatable)")
	return cmd
}

func newDLQCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "Inspect and replay dead-lettered tasks"}
	var jobName, namespace string
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead-lettered tasks, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &orreryv1.ListDeadLettersRequest{PageSize: 500}
			if jobName != "" {
				req.Job = jobRef(jobName, namespace)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK\tJOB\tSTEP\tSCHEDULED (UTC)\tATTEMPTS\tLAST ERROR")
			for {
				res, err := g.runClient().ListDeadLetters(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				for _, d := range res.Msg.GetDeadLetters() {
					fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%d\t%s\n", d.GetTaskId(), d.GetNamespace(), d.GetJob(), d.GetStep(), ts(d.GetScheduledTime()), d.GetAttempts(), d.GetLastError())
				}
				if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
					return tw.Flush()
				}
			}
		},
	}
	var all bool
	var limit int32
	replay := &cobra.Command{
		Use:   "replay [TASK_ID ...] | --all [--job NAME]",
		Short: "Give dead-lettered tasks one more attempt",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && !all {
				return fmt.Errorf("name task ids, or pass --all (with --job to limit it to one job)")
			}
			req := &orreryv1.ReplayDeadLettersRequest{TaskIds: args, Limit: limit}
			if jobName != "" {
				req.Job = jobRef(jobName, namespace)
			}
			res, err := g.runClient().ReplayDeadLetters(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d task(s) replayed\n", len(res.Msg.GetTaskIds()))
			return nil
		},
	}
	replay.Flags().BoolVar(&all, "all", false, "replay every dead letter (of --job, if given)")
	replay.Flags().Int32Var(&limit, "limit", 0, "with --all, at most this many (default 10000)")
	for _, c := range []*cobra.Command{list, replay} {
		c.Flags().StringVar(&jobName, "job", "", "only this job's dead letters (name or id)")
		c.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace of --job")
	}
	cmd.AddCommand(list, replay)
	return cmd
}

func newClusterCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cluster",
		Short: "Show scheduler nodes, shard owners, epochs and lag",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := g.clusterClient().GetCluster(cmd.Context(), connect.NewRequest(&orreryv1.GetClusterRequest{}))
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tNAME\tLIVE\tSHARDS\tHEARTBEAT (UTC)")
			for _, n := range res.Msg.GetNodes() {
				if !n.GetLive() && n.GetShards() == 0 {
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%s\n", n.GetId(), n.GetName(), n.GetLive(), n.GetShards(), ts(n.GetHeartbeatTime()))
			}
			_ = tw.Flush()
			fmt.Fprintln(w)
			tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SHARD\tOWNER\tEPOCH\tLEASE UNTIL (UTC)\tLAG")
			for _, s := range res.Msg.GetShards() {
				owner := s.GetOwnerName()
				if owner == "" {
					owner = "-"
				}
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.3fs\n", s.GetId(), owner, s.GetEpoch(), ts(s.GetLeaseExpireTime()), s.GetLagSeconds())
			}
			_ = tw.Flush()
			fmt.Fprintln(w)
			tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKER\tLIVE\tTENANTS\tQUEUES\tREMOTE TYPES\tHELD\tRESOURCES (USED/CAPACITY)\tENFORCED\tHEARTBEAT (UTC)")
			for _, wk := range res.Msg.GetWorkers() {
				tenants := strings.Join(wk.GetTenants(), ",")
				switch {
				case wk.GetRemote():
					tenants = "-"
				case wk.GetShared():
					tenants = "shared"
				}
				var queues []string
				for _, q := range slices.Sorted(maps.Keys(wk.GetQueues())) {
					queues = append(queues, fmt.Sprintf("%s=%d", q, wk.GetQueues()[q]))
				}
				types := "-"
				if wk.GetRemote() {
					types = strings.Join(wk.GetTypes(), ",")
				}
				fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", wk.GetName(), wk.GetLive(), tenants, strings.Join(queues, " "), types,
					wk.GetTasksHeld(), api.ResourceUsage(wk.GetCapacity(), wk.GetAllocated()), cmp.Or(wk.GetEnforces(), "-"), ts(wk.GetHeartbeatTime()))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(res.Msg.GetQueues()) > 0 {
				fmt.Fprintln(w)
				tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "QUEUE\tREADY\tOLDEST READY\tRESOURCES (USED/CAPACITY)")
				for _, q := range res.Msg.GetQueues() {
					fmt.Fprintf(tw, "%s\t%d\t%.1fs\t%s\n", q.GetQueue(), q.GetReady(), q.GetOldestReadySeconds(), api.ResourceUsage(q.GetCapacity(), q.GetAllocated()))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if len(res.Msg.GetBusiestKeys()) > 0 {
				fmt.Fprintln(w)
				tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "KEY KIND\tTENANT\tKEY\tWAITING\tOLDEST WAITED")
				for _, k := range res.Msg.GetBusiestKeys() {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1fs\n", k.GetKind(), k.GetTenant(), k.GetKey(), k.GetWaiting(), k.GetOldestWaitingSeconds())
				}
				return tw.Flush()
			}
			return nil
		},
	}
}

// itemCounts says a fan-out's items by status, in the order of a task's
// life: "2 running, 7 succeeded".
func itemCounts(c *orreryv1.ItemCounts) string {
	var parts []string
	for _, st := range lifecycle.TaskStatuses {
		if n := c.GetByStatus()[string(st)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return strings.Join(parts, ", ")
}

// debounceLine says what a debounced run took and, while it waits, when
// it starts: "debounce key web: 3 triggers, starts at 12:00:30Z unless
// triggered again".
func debounceLine(r *orreryv1.Run) string {
	line := "debounce"
	if k := r.GetDebounceKey(); k != "" {
		line += " key " + printable(k)
	}
	line += fmt.Sprintf(": %d trigger", r.GetDebounceCount())
	if r.GetDebounceCount() != 1 {
		line += "s"
	}
	if at := r.GetDebounceTime(); at != nil {
		line += ", starts at " + at.AsTime().UTC().Format(time.RFC3339) + " unless triggered again"
	}
	return line
}
