package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag"
)

func newJobsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "Create, inspect, pause, resume and delete jobs"}
	var namespace string
	cmd.PersistentFlags().StringVarP(&namespace, "namespace", "n", "", "namespace of the job named (default \"default\")")

	var file, idemKey string
	create := &cobra.Command{
		Use:   "create -f job.yaml",
		Short: "Create the jobs a YAML file defines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			docs, err := readResources(file)
			if err != nil {
				return err
			}
			for i, d := range docs {
				md, spec := api.ResourceToProto(d.Resource)
				key := idemKey
				if key != "" && len(docs) > 1 {
					key = fmt.Sprintf("%s-%d", idemKey, i)
				}
				res, err := g.jobClient().CreateJob(cmd.Context(), connect.NewRequest(&orreryv1.CreateJobRequest{Metadata: md, Spec: spec, IdempotencyKey: key}))
				if err != nil {
					return fmt.Errorf("%s:%d: %w", d.File, d.Line, err)
				}
				j := res.Msg.GetJob()
				fmt.Fprintf(cmd.OutOrStdout(), "job %s/%s created (id %s, version %d, next fire %s)\n",
					j.GetMetadata().GetNamespace(), j.GetMetadata().GetName(), j.GetId(), j.GetVersion(), fireTime(j.GetNextFireTime().AsTime(), j.GetNextFireTime() != nil))
			}
			return nil
		},
	}
	create.Flags().StringVarP(&file, "file", "f", "", "YAML file with one or more Job documents ('-' for stdin)")
	create.Flags().StringVar(&idemKey, "idempotency-key", "", "replaying the same create with this key returns the first answer")
	_ = create.MarkFlagRequired("file")

	var output string
	get := &cobra.Command{
		Use:   "get NAME|ID",
		Short: "Show a job, its status and its next fire times",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.jobClient().GetJob(cmd.Context(), connect.NewRequest(&orreryv1.GetJobRequest{Ref: jobRef(args[0], namespace)}))
			if err != nil {
				return err
			}
			return printJob(cmd.OutOrStdout(), output, res.Msg)
		},
	}
	get.Flags().StringVarP(&output, "output", "o", "yaml", "yaml or json")

	var status, labels string
	var pageSize int32
	list := &cobra.Command{
		Use:   "list",
		Short: "List jobs sorted by name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &orreryv1.ListJobsRequest{Namespace: namespace, PageSize: pageSize}
			if status != "" {
				v, ok := orreryv1.JobStatus_value["JOB_STATUS_"+strings.ToUpper(status)]
				if !ok {
					return fmt.Errorf("--status: %q is not one of active, paused, deleted", status)
				}
				req.Status = orreryv1.JobStatus(v)
			}
			if labels != "" {
				req.Labels = map[string]string{}
				for _, kv := range strings.Split(labels, ",") {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						return fmt.Errorf("--label: %q is not key=value", kv)
					}
					req.Labels[k] = v
				}
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAMESPACE\tNAME\tSTATUS\tVERSION\tSCHEDULE\tNEXT FIRE (UTC)")
			for {
				res, err := g.jobClient().ListJobs(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				for _, j := range res.Msg.GetJobs() {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", j.GetMetadata().GetNamespace(), j.GetMetadata().GetName(),
						api.StatusName(j.GetStatus()), j.GetVersion(), describeSchedule(j.GetSpec().GetSchedule()),
						fireTime(j.GetNextFireTime().AsTime(), j.GetNextFireTime() != nil))
				}
				if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
					return tw.Flush()
				}
			}
		},
	}
	list.Flags().StringVar(&status, "status", "", "active, paused or deleted (default: all but deleted)")
	list.Flags().StringVarP(&labels, "label", "l", "", "only jobs with these labels: key=value[,key=value]")
	list.Flags().Int32Var(&pageSize, "page-size", 100, "jobs fetched per request")

	verb := func(use, short string, call func(cmd *cobra.Command, ref *orreryv1.JobRef) (*orreryv1.Job, error), done string) *cobra.Command {
		return &cobra.Command{
			Use:   use + " NAME|ID",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				j, err := call(cmd, jobRef(args[0], namespace))
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "job %s/%s %s (status %s, next fire %s)\n", j.GetMetadata().GetNamespace(), j.GetMetadata().GetName(),
					done, api.StatusName(j.GetStatus()), fireTime(j.GetNextFireTime().AsTime(), j.GetNextFireTime() != nil))
				return nil
			},
		}
	}
	pause := verb("pause", "Stop a job from firing", func(cmd *cobra.Command, ref *orreryv1.JobRef) (*orreryv1.Job, error) {
		res, err := g.jobClient().PauseJob(cmd.Context(), connect.NewRequest(&orreryv1.PauseJobRequest{Ref: ref}))
		if err != nil {
			return nil, err // res is nil
		}
		return res.Msg.GetJob(), nil
	}, "paused")
	resume := verb("resume", "Let a paused job fire again (its misfire policy decides about missed instants)", func(cmd *cobra.Command, ref *orreryv1.JobRef) (*orreryv1.Job, error) {
		res, err := g.jobClient().ResumeJob(cmd.Context(), connect.NewRequest(&orreryv1.ResumeJobRequest{Ref: ref}))
		if err != nil {
			return nil, err // res is nil
		}
		return res.Msg.GetJob(), nil
	}, "resumed")
	del := verb("delete", "Delete a job (its history stays)", func(cmd *cobra.Command, ref *orreryv1.JobRef) (*orreryv1.Job, error) {
		res, err := g.jobClient().DeleteJob(cmd.Context(), connect.NewRequest(&orreryv1.DeleteJobRequest{Ref: ref}))
		if err != nil {
			return nil, err // res is nil
		}
		return res.Msg.GetJob(), nil
	}, "deleted")
	cmd.AddCommand(create, get, list, pause, resume, del, newTriggerCmd(g, &namespace), newBackfillCmd(g, &namespace), newBackfillsCmd(g, &namespace), newCancelBackfillCmd(g, &namespace))
	return cmd
}

// readResources decodes and validates a YAML file locally, so that errors
// name file, line and column before anything is sent.
func readResources(file string) ([]*dag.Document, error) {
	var data []byte
	var err error
	if file == "-" {
		file = "<stdin>"
		data, err = readYAML(file, os.Stdin)
	} else {
		data, err = readYAMLFile(file)
	}
	if err != nil {
		return nil, err
	}
	docs, es := dag.Decode(file, data)
	if len(es) > 0 {
		return nil, es
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: no Job documents", file)
	}
	return docs, nil
}

func jobRef(arg, namespace string) *orreryv1.JobRef {
	if _, err := uuid.Parse(arg); err == nil {
		return &orreryv1.JobRef{Id: arg}
	}
	return &orreryv1.JobRef{Namespace: namespace, Name: arg}
}

func fireTime(t time.Time, ok bool) string {
	if !ok {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func describeSchedule(s *orreryv1.Schedule) string {
	if s.GetAt() != "" {
		return "at " + s.GetAt()
	}
	crons := s.GetCrons()
	if s.GetCron() != "" {
		crons = append([]string{s.GetCron()}, crons...)
	}
	out := strings.Join(crons, " | ")
	if s.GetTimezone() != "" && s.GetTimezone() != "UTC" {
		out += " (" + s.GetTimezone() + ")"
	}
	return out
}

// printJob writes a job as the YAML resource plus a status section, or as
// the API's JSON.
func printJob(w io.Writer, format string, res *orreryv1.GetJobResponse) error {
	switch format {
	case "json":
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(res)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	case "yaml", "":
	default:
		return errors.New("--output: use yaml or json")
	}
	j := res.GetJob()
	r := api.ResourceFromProto(j.GetMetadata(), j.GetSpec())
	var next []string
	for _, t := range res.GetNextFireTimes() {
		next = append(next, t.AsTime().UTC().Format(time.RFC3339))
	}
	doc := struct {
		dag.Resource `yaml:",inline"`
		Status       map[string]any `yaml:"status"`
	}{Resource: r, Status: map[string]any{
		"id": j.GetId(), "status": api.StatusName(j.GetStatus()), "version": j.GetVersion(), "shard": j.GetShard(),
		"created":         fmt.Sprintf("%s by %s", j.GetCreateTime().AsTime().UTC().Format(time.RFC3339), j.GetCreatedBy()),
		"updated":         fmt.Sprintf("%s by %s", j.GetUpdateTime().AsTime().UTC().Format(time.RFC3339), j.GetUpdatedBy()),
		"next_fire_times": next,
	}}
	if src := j.GetSource(); src != nil {
		doc.Status["source"] = strings.TrimSpace(src.GetPath() + " " + src.GetCommit())
	}
	links := func(ls []*orreryv1.JobLink) []string {
		var out []string
		for _, l := range ls {
			out = append(out, fmt.Sprintf("%s/%s on %s (%s)", l.GetNamespace(), l.GetName(), strings.Join(l.GetOn(), ","), l.GetStatus()))
		}
		return out
	}
	if up := links(res.GetUpstream()); up != nil {
		doc.Status["upstream"] = up
	}
	if down := links(res.GetDownstream()); down != nil {
		doc.Status["downstream"] = down
	}
	jobsOf := func(ls []*orreryv1.JobLink) []string {
		var out []string
		for _, l := range ls {
			s := l.GetNamespace() + "/" + l.GetName()
			if l.GetStatus() != "" {
				s += " (" + l.GetStatus() + ")"
			}
			out = append(out, s)
		}
		return out
	}
	if calls := jobsOf(res.GetCalls()); calls != nil {
		doc.Status["runs_jobs"] = calls
	}
	if callers := jobsOf(res.GetCallers()); callers != nil {
		doc.Status["run_by"] = callers
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}
