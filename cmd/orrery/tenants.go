package main

import (
	"fmt"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

func newTenantsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "tenants", Short: "Tenants: create, list (a system admin key is needed)"}
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
	cmd.AddCommand(create, list)
	return cmd
}
