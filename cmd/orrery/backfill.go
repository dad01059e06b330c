package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

func newBackfillCmd(g *globals, namespace *string) *cobra.Command {
	var from, to, redo string
	var dryRun, newestFirst, allowLarge bool
	var maxConcurrent int32
	cmd := &cobra.Command{
		Use:   "backfill NAME|ID --from T1 --to T2 [--dry-run] [--redo none|failed|all] [--max-concurrent N] [--newest-first]",
		Short: "Fire the instants of a job's schedule in a past range, each once",
		Long: `backfill fires every instant of the job's schedule (its time zone, start and
end, exclusions) from --from to --to, both included, as a run with trigger
backfill at that instant, at most --max-concurrent unfinished at once.
An instant that has a run already keeps it: the run is left alone
(--redo none: a second identical backfill creates nothing new); or, with
--redo failed, it is retried from where it failed when it ended failed,
dead-lettered or cancelled; or, with --redo all, it runs again from the
start when it ended at all, succeeded too. Under failed and all, an
instant the scheduler recorded skipped (or cancelled before it started)
gets a run of the backfill in the record's place. A run that goes on is
left alone. --dry-run prints the instants and writes nothing. A range of
more than 10,000 instants needs --allow-large. "orrery jobs backfills NAME"
shows the progress.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &orreryv1.BackfillRequest{Ref: jobRef(args[0], *namespace), Redo: redo, MaxConcurrent: maxConcurrent,
				NewestFirst: newestFirst, DryRun: dryRun, AllowLarge: allowLarge}
			for _, f := range []struct {
				flag, v string
				to      **timestamppb.Timestamp
			}{{"--from", from, &req.From}, {"--to", to, &req.To}} {
				if f.v == "" {
					return fmt.Errorf("%s is required (RFC 3339, such as 2026-11-01T00:00:00Z)", f.flag)
				}
				t, err := time.Parse(time.RFC3339, f.v)
				if err != nil {
					return fmt.Errorf("%s: %q is not an RFC 3339 instant such as 2026-11-01T00:00:00Z", f.flag, f.v)
				}
				*f.to = timestamppb.New(t)
			}
			res, err := g.jobClient().Backfill(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if dryRun {
				m := res.Msg
				fmt.Fprintf(w, "dry run: %d instants, %d of them have a run already; in the order they would fire:\n", m.GetTotal(), m.GetHaveRuns())
				for _, t := range m.GetInstants() {
					fmt.Fprintln(w, t.AsTime().UTC().Format(time.RFC3339))
				}
				if int(m.GetTotal()) > len(m.GetInstants()) {
					fmt.Fprintf(w, "... and %d more\n", int(m.GetTotal())-len(m.GetInstants()))
				}
				return nil
			}
			b := res.Msg.GetBackfill()
			fmt.Fprintf(w, "backfill %s: %d instants, %s, at most %d at once\n", b.GetId(), b.GetTotal(), order(b.GetNewestFirst()), b.GetMaxConcurrent())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the range's first instant, RFC 3339")
	f.StringVar(&to, "to", "", "the range's last instant, RFC 3339 (not in the future)")
	f.StringVar(&redo, "redo", "none", "instants that have a run: none leaves them, failed retries a failed, dead-lettered or cancelled one (and runs a skipped instant), all runs an ended one again from the start")
	f.Int32Var(&maxConcurrent, "max-concurrent", 10, "unfinished backfill runs of the job at once (at most 1000)")
	f.BoolVar(&newestFirst, "newest-first", false, "fire the latest instants first")
	f.BoolVar(&dryRun, "dry-run", false, "print the instants, write nothing")
	f.BoolVar(&allowLarge, "allow-large", false, "allow a range of more than 10,000 instants (up to 100,000)")
	return cmd
}

func order(newestFirst bool) string {
	if newestFirst {
		return "newest first"
	}
	return "oldest first"
}

func newBackfillsCmd(g *globals, namespace *string) *cobra.Command {
	return &cobra.Command{
		Use:   "backfills NAME|ID",
		Short: "List a job's backfills and their progress, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.jobClient().ListBackfills(cmd.Context(), connect.NewRequest(&orreryv1.ListBackfillsRequest{Ref: jobRef(args[0], *namespace)}))
			if err != nil {
				return err
			}
			printBackfills(cmd.OutOrStdout(), res.Msg.GetBackfills())
			return nil
		},
	}
}

func newCancelBackfillCmd(g *globals, namespace *string) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel-backfill NAME|ID BACKFILL_ID",
		Short: "End a running backfill: it fires no more instants (the runs it wrote go on)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.jobClient().CancelBackfill(cmd.Context(), connect.NewRequest(&orreryv1.CancelBackfillRequest{Ref: jobRef(args[0], *namespace), Id: args[1]}))
			if err != nil {
				return err
			}
			b := res.Msg.GetBackfill()
			fmt.Fprintf(cmd.OutOrStdout(), "backfill %s cancelled after %d of %d instants\n", b.GetId(), b.GetCreated()+b.GetExisting()+b.GetRetried(), b.GetTotal())
			return nil
		},
	}
}

func printBackfills(out io.Writer, bs []*orreryv1.JobBackfill) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFROM\tTO\tSTATUS\tINSTANTS\tNEW RUNS\tLEFT ALONE\tRUN AGAIN\tAT\tBY")
	for _, b := range bs {
		status := b.GetStatus()
		if b.GetReason() != "" {
			status += " (" + b.GetReason() + ")"
		}
		at := "-"
		if b.GetCursor() != nil {
			at = b.GetCursor().AsTime().UTC().Format(time.RFC3339)
		}
		handled := b.GetCreated() + b.GetExisting() + b.GetRetried()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%d\t%d\t%s\t%s\n", b.GetId(), b.GetFrom().AsTime().UTC().Format(time.RFC3339),
			b.GetTo().AsTime().UTC().Format(time.RFC3339), status, handled, b.GetTotal(), b.GetCreated(), b.GetExisting(), b.GetRetried(), at, b.GetCreatedBy())
	}
	tw.Flush()
}
