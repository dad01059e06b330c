package main

import (
	"fmt"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

func newGrantsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "grants",
		Short: "Roles of principals on namespaces and jobs: create, list, revoke (the most permissive applicable role wins)",
	}
	var namespace, job string
	scope := func(c *cobra.Command) {
		c.Flags().StringVarP(&namespace, "namespace", "n", "", "the namespace (required)")
		c.Flags().StringVar(&job, "job", "", "one job of the namespace (default: the whole namespace)")
		_ = c.MarkFlagRequired("namespace")
	}
	create := &cobra.Command{
		Use:   "create PRINCIPAL reader|editor|admin -n NAMESPACE [--job NAME]",
		Short: "Give a principal a role on a namespace or one job (replacing its role on exactly that); admin of it needed",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.accessClient().GrantRole(cmd.Context(), connect.NewRequest(&orreryv1.GrantRoleRequest{
				Principal: args[0], Role: args[1], Namespace: namespace, Job: job}))
			if err != nil {
				return err
			}
			gr := res.Msg.GetGrant()
			fmt.Fprintf(cmd.OutOrStdout(), "%s is %s on %s\n", gr.GetPrincipal(), gr.GetRole(), grantScope(gr.GetNamespace(), gr.GetJob()))
			return nil
		},
	}
	scope(create)
	revoke := &cobra.Command{
		Use:   "revoke PRINCIPAL -n NAMESPACE [--job NAME]",
		Short: "Remove a principal's grant on a namespace or one job",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := g.accessClient().RevokeGrant(cmd.Context(), connect.NewRequest(&orreryv1.RevokeGrantRequest{
				Principal: args[0], Namespace: namespace, Job: job}))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s's grant on %s\n", args[0], grantScope(namespace, job))
			return nil
		},
	}
	scope(revoke)
	var principal string
	list := &cobra.Command{
		Use:   "list [-n NAMESPACE] [--principal NAME]",
		Short: "List grants by namespace, job and principal (all of them: tenant admin; one namespace: its admin)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAMESPACE\tJOB\tPRINCIPAL\tROLE\tGRANTED (UTC)\tBY")
			req := &orreryv1.ListGrantsRequest{Namespace: namespace, Principal: principal, PageSize: 500}
			for {
				res, err := g.accessClient().ListGrants(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				for _, gr := range res.Msg.GetGrants() {
					j := gr.GetJob()
					if j == "" {
						j = "*"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", gr.GetNamespace(), j, gr.GetPrincipal(), gr.GetRole(), ts(gr.GetCreatedAt()), gr.GetCreatedBy())
				}
				if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
					return tw.Flush()
				}
			}
		},
	}
	list.Flags().StringVarP(&namespace, "namespace", "n", "", "only this namespace")
	list.Flags().StringVar(&principal, "principal", "", "only this principal")
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func grantScope(namespace, job string) string {
	if job == "" {
		return "namespace " + namespace
	}
	return "job " + namespace + "/" + job
}
