package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

func newTenantsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "tenants", Short: "Tenants: create, list, quotas (a system admin key is needed)"}
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a tenant; then give it a first admin with `orrery keys create --tenant NAME --role admin`",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.accessClient().CreateTenant(cmd.Context(), connect.NewRequest(&orreryv1.CreateTenantRequest{Name: args[0]}))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created tenant %s (%s)\n", res.Msg.GetTenant().GetName(), res.Msg.GetTenant().GetId())
			return nil
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List every tenant by name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tWEIGHT\tMAX CONCURRENCY\tCREATED (UTC)")
			req := &orreryv1.ListTenantsRequest{PageSize: 500}
			for {
				res, err := g.accessClient().ListTenants(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				for _, t := range res.Msg.GetTenants() {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", t.GetName(), t.GetId(), t.GetWeight(), t.GetMaxConcurrency(), ts(t.GetCreatedAt()))
				}
				if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
					return tw.Flush()
				}
			}
		},
	}
	var maxConc, weight, maxItems, maxTree int32
	var queueCaps []string
	var maxJobs, maxDefBytes, maxRuns, maxTasks, maxHistory int64
	var maxCustom []string
	maxRes := map[string]string{} // --max-cpu, --max-memory, --max-gpu
	setQuota := &cobra.Command{
		Use:   "set-quota NAME",
		Short: "Set a tenant's admission quota and weight, and its storage quotas (audited)",
		Long: `Set a tenant's admission settings and storage quotas. Flags left out
keep their value. Admission settings apply at the admitters' next pass,
storage quotas at the tenant's next write.

  --max-concurrency N       tasks of the tenant holding a queue slot at once, in all queues (0: no quota)
  --weight W                its share of a queue against other tenants waiting there (1 to 1000)
  --queue Q=N               a cap in one queue (repeatable; Q=0 removes it)
  --max-jobs N              live jobs (0: no quota)
  --max-definition-bytes N  bytes of the live jobs' definitions, as JSON (0: no quota)
  --max-runs N              runs kept until retention prunes them (0: no quota)
  --max-tasks N             tasks of those runs (0: no quota)
  --max-history-bytes N     bytes of the definitions' history: versions kept besides the live ones, and the audit rows of changes (0: no quota)
  --max-items-per-step N    items of one fan-out, for_each (0: the default, 10000; at most 100000)
  --max-runs-per-tree N     runs that job steps and after-triggers start from one run, the first not counted (0: the default, 1000; at most 100000)
  --max-cpu Q, --max-memory Q, --max-gpu N, --max-custom NAME=N
                            what the tenant's admitted tasks ask for together, in all queues (0 lifts one)

A write over a storage quota is refused naming the quota; an instant a
schedule fires over max-runs or max-tasks is recorded as a skipped run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &orreryv1.SetTenantQuotaRequest{Tenant: args[0], Queues: map[string]int32{}}
			if cmd.Flags().Changed("max-concurrency") {
				req.MaxConcurrency = &maxConc
			}
			if cmd.Flags().Changed("weight") {
				req.Weight = &weight
			}
			if cmd.Flags().Changed("max-items-per-step") {
				req.MaxItemsPerStep = &maxItems
			}
			if cmd.Flags().Changed("max-runs-per-tree") {
				req.MaxRunsPerTree = &maxTree
			}
			for _, f := range []struct {
				flag string
				v    *int64
				dst  **int64
			}{
				{"max-jobs", &maxJobs, &req.MaxJobs}, {"max-definition-bytes", &maxDefBytes, &req.MaxDefinitionBytes},
				{"max-runs", &maxRuns, &req.MaxRuns}, {"max-tasks", &maxTasks, &req.MaxTasks}, {"max-history-bytes", &maxHistory, &req.MaxHistoryBytes},
			} {
				if cmd.Flags().Changed(f.flag) {
					*f.dst = f.v
				}
			}
			var max orreryv1.Resources
			named := false
			for flag, dst := range map[string]*string{"max-cpu": &max.Cpu, "max-memory": &max.Memory, "max-gpu": &max.Gpu} {
				if cmd.Flags().Changed(flag) {
					*dst, named = maxRes[flag], true
				}
			}
			for _, c := range maxCustom {
				name, n, ok := strings.Cut(c, "=")
				if !ok || name == "" {
					return fmt.Errorf("--max-custom %q: give NAME=N (licence=10)", c)
				}
				if max.Custom == nil {
					max.Custom = map[string]string{}
				}
				max.Custom[name], named = n, true
			}
			if named {
				req.MaxResources = &max
			}
			for _, qc := range queueCaps {
				q, v, found := strings.Cut(qc, "=")
				n, err := strconv.ParseInt(v, 10, 32)
				if !found || err != nil {
					return fmt.Errorf("--queue %q: want QUEUE=N, N a whole number from 0 (no cap) to 1000000", qc)
				}
				if _, dup := req.Queues[q]; dup {
					return fmt.Errorf("--queue %q: queue %q given twice", qc, q)
				}
				req.Queues[q] = int32(n)
			}
			res, err := g.accessClient().SetTenantQuota(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			printQuota(cmd.OutOrStdout(), res.Msg.GetQuota())
			if over := res.Msg.GetOverQuota(); len(over) > 0 {
				more := ""
				if res.Msg.GetOverQuotaTruncated() {
					more = " (and more)"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d live jobs%s have a step asking more than the new quota on its own; it waits until the quota is raised:\n", len(over), more)
				for _, o := range over {
					fmt.Fprintln(cmd.ErrOrStderr(), "  "+o)
				}
			}
			return nil
		},
	}
	setQuota.Flags().Int32Var(&maxConc, "max-concurrency", 0, "tasks holding a slot at once in all queues (0: no quota)")
	setQuota.Flags().Int32Var(&weight, "weight", 1, "share against other tenants (1 to 1000)")
	setQuota.Flags().StringArrayVar(&queueCaps, "queue", nil, "per-queue cap QUEUE=N (0 removes); repeatable")
	setQuota.Flags().Int64Var(&maxJobs, "max-jobs", 0, "live jobs (0: no quota)")
	setQuota.Flags().Int64Var(&maxDefBytes, "max-definition-bytes", 0, "bytes of the live jobs' definitions (0: no quota)")
	setQuota.Flags().Int64Var(&maxRuns, "max-runs", 0, "runs kept until retention prunes them (0: no quota)")
	setQuota.Flags().Int64Var(&maxTasks, "max-tasks", 0, "tasks of the runs kept (0: no quota)")
	setQuota.Flags().Int64Var(&maxHistory, "max-history-bytes", 0, "bytes of the definitions' history: versions kept and audit rows of changes (0: no quota)")
	setQuota.Flags().Int32Var(&maxItems, "max-items-per-step", 0, "items of one fan-out (0: the default, 10000; at most 100000)")
	setQuota.Flags().Int32Var(&maxTree, "max-runs-per-tree", 0, "runs that job steps and after-triggers start from one run (0: the default, 1000; at most 100000)")
	for flag, help := range map[string]string{"max-cpu": "cores the tenant's admitted tasks ask for together: 64, 500m (0 lifts it)",
		"max-memory": "memory they ask for together: 256Gi (0 lifts it)", "max-gpu": "GPUs they ask for together (0 lifts it)"} {
		setQuota.Flags().Var(stringInto(maxRes, flag), flag, help)
	}
	setQuota.Flags().StringArrayVar(&maxCustom, "max-custom", nil, "a custom resource's quota NAME=N (repeatable; N=0 lifts it)")
	getQuota := &cobra.Command{
		Use:   "quota [NAME]",
		Short: "Show a tenant's quotas and what it stores (without NAME: your own tenant's)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var name string
			if len(args) == 1 {
				name = args[0]
			}
			res, err := g.accessClient().GetTenantQuota(cmd.Context(), connect.NewRequest(&orreryv1.GetTenantQuotaRequest{Tenant: name}))
			if err != nil {
				return err
			}
			printQuota(cmd.OutOrStdout(), res.Msg.GetQuota())
			return nil
		},
	}
	cmd.AddCommand(create, list, setQuota, getQuota)
	return cmd
}

func printQuota(w io.Writer, q *orreryv1.TenantQuota) {
	limit := "none"
	if q.GetMaxConcurrency() > 0 {
		limit = strconv.Itoa(int(q.GetMaxConcurrency()))
	}
	items := "10000 (the default)"
	if n := q.GetMaxItemsPerStep(); n > 0 {
		items = strconv.Itoa(int(n))
	}
	tree := "1000 (the default)"
	if n := q.GetMaxRunsPerTree(); n > 0 {
		tree = strconv.Itoa(int(n))
	}
	fmt.Fprintf(w, "tenant %s  max concurrency %s  weight %d  items per fan-out %s  runs per tree %s\n", q.GetTenant(), limit, q.GetWeight(), items, tree)
	if r := q.GetMaxResources(); r != nil {
		fmt.Fprintf(w, "  resources at most %s\n", api.ResourcesText(r))
	}
	for _, name := range slices.Sorted(maps.Keys(q.GetQueues())) {
		fmt.Fprintf(w, "  queue %s  max concurrency %d\n", name, q.GetQueues()[name])
	}
	u := q.GetUsage()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  storage\tholds\tquota")
	for _, r := range []struct {
		name        string
		used, limit int64
	}{
		{"jobs", u.GetJobs(), q.GetMaxJobs()}, {"definition bytes", u.GetDefinitionBytes(), q.GetMaxDefinitionBytes()},
		{"runs", u.GetRuns(), q.GetMaxRuns()}, {"tasks", u.GetTasks(), q.GetMaxTasks()},
		{"history bytes", u.GetHistoryBytes(), q.GetMaxHistoryBytes()},
	} {
		limit := "none"
		if r.limit > 0 {
			limit = strconv.FormatInt(r.limit, 10)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", r.name, r.used, limit)
	}
	_ = tw.Flush()
}

// stringInto is a flag whose value goes to m[name].
func stringInto(m map[string]string, name string) pflag.Value { return &mapValue{m, name} }

type mapValue struct {
	m    map[string]string
	name string
}

func (v *mapValue) String() string     { return v.m[v.name] }
func (v *mapValue) Set(s string) error { v.m[v.name] = s; return nil }
func (v *mapValue) Type() string       { return "quantity" }
