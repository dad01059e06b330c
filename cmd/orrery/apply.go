package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
)

func newApplyCmd(g *globals) *cobra.Command {
	var path, namespace string
	var dryRun, prune bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR [--dry-run] [--prune] [--namespace NS]",
		Short: "Make the server's jobs match a folder of YAML: print the plan, then apply it in one request",
		Long: `apply reads every *.yaml and *.yml under the folder, checks them (as
validate does), asks the server for a plan and prints it, one line per job:

  + create NS/NAME
  ~ update NS/NAME: the fields that change
  - delete NS/NAME        (with --prune: jobs applied earlier, now gone from the folder)
  = unchanged NS/NAME

then applies it in one transaction, unless --dry-run. Running it again
changes nothing and says so, so it is safe to run from CI on every commit.
Jobs carry their source: the file, and the commit when the folder is a git
checkout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			jobs, docs, err := readFolder(path, namespace, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			var namespaces []string
			if namespace != "" {
				namespaces = []string{namespace}
			}
			client := orreryv1connect.NewPipelineServiceClient(g.httpClient(), g.baseURL())
			plan, err := client.Plan(cmd.Context(), connect.NewRequest(&orreryv1.PlanRequest{Jobs: jobs, Prune: prune, Namespaces: namespaces}))
			if err != nil {
				return pointAt(err, docs) // the plan refuses what apply would
			}
			out := cmd.OutOrStdout()
			counts := printPlan(out, plan.Msg.GetChanges())
			if counts["create"]+counts["update"]+counts["delete"] == 0 {
				fmt.Fprintf(out, "No changes: %d job(s) unchanged.\n", counts["unchanged"])
				return nil
			}
			summary := fmt.Sprintf("%d to create, %d to update, %d to delete, %d unchanged", counts["create"], counts["update"], counts["delete"], counts["unchanged"])
			if dryRun {
				fmt.Fprintf(out, "Plan: %s (dry run: nothing applied).\n", summary)
				// The forecast is a help, not the plan: a failure to get it
				// (an older server, a scope too large) is said, not an error.
				if err := printPeakMove(cmd, client, jobs, prune, namespace); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "the forecast of the busiest minute is unavailable: %v\n", err)
				}
				return nil
			}
			res, err := client.Apply(cmd.Context(), connect.NewRequest(&orreryv1.ApplyRequest{Jobs: jobs, Prune: prune, Namespaces: namespaces}))
			if err != nil {
				return pointAt(err, docs)
			}
			done := map[string]int{}
			for _, c := range res.Msg.GetChanges() {
				done[c.GetAction()]++
			}
			fmt.Fprintf(out, "Applied: %d created, %d updated, %d deleted, %d unchanged.\n", done["create"], done["update"], done["delete"], done["unchanged"])
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "file", "f", "", "a YAML file, or a folder searched for *.yaml and *.yml")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	cmd.Flags().BoolVar(&prune, "prune", false, "delete jobs applied earlier that the folder no longer has (in its namespaces, or --namespace)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace for documents that name none; documents naming another are refused; the scope of --prune")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// printPlan writes one line per change and counts the actions.
func printPlan(w io.Writer, changes []*orreryv1.Change) map[string]int {
	counts := map[string]int{}
	marks := map[string]string{"create": "+", "update": "~", "delete": "-", "unchanged": "="}
	for _, c := range changes {
		counts[c.GetAction()]++
		line := fmt.Sprintf("%s %s %s/%s", marks[c.GetAction()], c.GetAction(), c.GetNamespace(), c.GetName())
		if len(c.GetFields()) > 0 {
			line += ": " + strings.Join(c.GetFields(), ", ")
		}
		fmt.Fprintln(w, line)
	}
	return counts
}

// readFolder decodes and checks every YAML file, and records where each
// job comes from; warnings (daylight-saving changes its schedules meet)
// go to warn.
func readFolder(path, namespace string, warn io.Writer) ([]*orreryv1.AppliedJob, map[string]*dag.Document, error) {
	files, err := yamlFiles(path)
	if err != nil {
		return nil, nil, err
	}
	docsOf := map[string]*dag.Document{}
	top, commit := gitInfo(path)
	var all dag.Errors
	var out []*orreryv1.AppliedJob
	for _, f := range files {
		data, err := readYAMLFile(f)
		if err != nil {
			return nil, nil, err
		}
		docs, es := dag.Decode(f, data)
		all = append(all, es...)
		for _, d := range docs {
			for _, w := range d.ScheduleWarnings(time.Now()) {
				fmt.Fprintln(warn, w.Error())
			}
			if namespace != "" {
				switch {
				case !d.Has("metadata.namespace"):
					d.Resource.Metadata.Namespace = namespace
				case d.Resource.Metadata.Namespace != namespace:
					line, col := d.Position("metadata.namespace")
					all = append(all, &dag.FieldError{File: f, Line: line, Col: col, Field: "metadata.namespace",
						Message: fmt.Sprintf("%q differs from --namespace %q", d.Resource.Metadata.Namespace, namespace)})
					continue
				}
			}
			docsOf[d.Resource.Metadata.Namespace+"/"+d.Resource.Metadata.Name] = d
			md, spec := api.ResourceToProto(d.Resource)
			src := &orreryv1.Source{Path: f, Commit: commit}
			if top != "" {
				if abs, err := filepath.Abs(f); err == nil {
					if rel, err := filepath.Rel(top, abs); err == nil {
						src.Path = rel
					}
				}
			}
			out = append(out, &orreryv1.AppliedJob{Metadata: md, Spec: spec, Source: src})
		}
	}
	if len(all) > 0 {
		return nil, nil, all
	}
	if len(out) == 0 {
		return nil, nil, errors.New(path + ": no Job documents")
	}
	return out, docsOf, nil
}

// pointAt writes the server's refusal of an apply as validate writes a
// mistake: each line the server begins with a job's NS/NAME and a field
// ("analytics/etl: spec.steps[0].resource_profile: no resource profile
// ...") is pointed at the file, line and column that wrote the field.
func pointAt(err error, docs map[string]*dag.Document) error {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		return err
	}
	var es dag.Errors
	for line := range strings.SplitSeq(ce.Message(), "\n") {
		job, rest, ok := strings.Cut(line, ": ")
		field, msg, ok2 := strings.Cut(rest, ": ")
		d := docs[job]
		if !ok || !ok2 || d == nil || strings.ContainsAny(field, " \t") {
			return err
		}
		l, c := d.Position(field)
		es = append(es, &dag.FieldError{File: d.File, Line: l, Col: c, Field: field, Message: msg})
	}
	return es
}

// gitInfo returns the top of the git checkout holding path and its HEAD
// commit, or empty strings when path is not in one.
func gitInfo(path string) (top, commit string) {
	dir := path
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		dir = filepath.Dir(path)
	}
	t, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", ""
	}
	c, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return strings.TrimSpace(string(t)), ""
	}
	return strings.TrimSpace(string(t)), strings.TrimSpace(string(c))
}

// printPeakMove says how applying jobs would move the busiest minute of
// the next 24 hours, over the namespace (every one the caller reads when
// empty): a platform team sees its midnight storm before midnight.
func printPeakMove(cmd *cobra.Command, client orreryv1connect.PipelineServiceClient, jobs []*orreryv1.AppliedJob, prune bool, namespace string) error {
	from := time.Now().Truncate(time.Minute)
	ask := func(with []*orreryv1.AppliedJob) (*orreryv1.ForecastResponse, error) {
		res, err := client.Forecast(cmd.Context(), connect.NewRequest(&orreryv1.ForecastRequest{Namespace: namespace,
			From: timestamppb.New(from), To: timestamppb.New(from.Add(24 * time.Hour)), Top: 1, Jobs: with, Prune: prune}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	before, err := ask(nil)
	if err != nil {
		return err
	}
	after, err := ask(jobs)
	if err != nil {
		return err
	}
	peak := func(f *orreryv1.ForecastResponse) string {
		if len(f.GetHottest()) == 0 {
			return "no runs"
		}
		h := f.GetHottest()[0]
		return fmt.Sprintf("%d runs at %s", h.GetRuns(), h.GetMinute().AsTime().UTC().Format("2006-01-02T15:04Z"))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Busiest minute of the next 24 hours: %s now, %s after applying (%d runs in all now, %d after).\n",
		peak(before), peak(after), before.GetRuns(), after.GetRuns())
	return nil
}
