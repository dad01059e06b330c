package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

func newProfilesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profiles",
		Short: "Resource profiles of your tenant, which steps name with resource_profile: set, list, delete",
	}
	var cpu, memory, gpu string
	var custom []string
	set := &cobra.Command{
		Use:   "set NAME [--cpu Q] [--memory Q] [--gpu N] [--custom NAME=N ...]",
		Short: "Create or replace a profile (admin of the tenant); runs created after it use it",
		Example: `  orrery profiles set gpu-large --cpu 8 --memory 64Gi --gpu 1
  orrery profiles set etl-small --cpu 500m --memory 512Mi --custom warehouse-conn=1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := &orreryv1.Resources{Cpu: cpu, Memory: memory, Gpu: gpu}
			for _, c := range custom {
				name, n, ok := strings.Cut(c, "=")
				if !ok || name == "" {
					return fmt.Errorf("--custom %q: give NAME=COUNT (licence=1)", c)
				}
				if r.Custom == nil {
					r.Custom = map[string]string{}
				}
				if _, dup := r.Custom[name]; dup {
					return fmt.Errorf("--custom %s: given twice", name)
				}
				r.Custom[name] = n
			}
			res, err := g.profileClient().SetProfile(cmd.Context(), connect.NewRequest(&orreryv1.SetProfileRequest{Name: args[0], Resources: r}))
			if err != nil {
				return err
			}
			p := res.Msg.GetProfile()
			fmt.Fprintf(cmd.OutOrStdout(), "profile %s: %s\n", p.GetName(), api.ResourcesText(p.GetResources()))
			return nil
		},
	}
	set.Flags().StringVar(&cpu, "cpu", "", "cores: 500m, 2")
	set.Flags().StringVar(&memory, "memory", "", "bytes: 512Mi, 4Gi")
	set.Flags().StringVar(&gpu, "gpu", "", "GPUs: a count")
	set.Flags().StringArrayVar(&custom, "custom", nil, "a named count, NAME=N (repeatable)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the tenant's profiles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := g.profileClient().ListProfiles(cmd.Context(), connect.NewRequest(&orreryv1.ListProfilesRequest{}))
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tRESOURCES\tUPDATED (UTC)")
			for _, p := range res.Msg.GetProfiles() {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.GetName(), api.ResourcesText(p.GetResources()), ts(p.GetUpdateTime()))
			}
			return tw.Flush()
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a profile no live job names (admin of the tenant)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.profileClient().DeleteProfile(cmd.Context(), connect.NewRequest(&orreryv1.DeleteProfileRequest{Name: args[0]})); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted profile %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(set, list, del)
	return cmd
}
