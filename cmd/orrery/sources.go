package main

import (
	"fmt"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

func newSourcesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sources",
		Short: "Event sources of your tenant: signed webhooks whose deliveries become events (create, list, delete)",
	}
	var kind, secret, namespace string
	create := &cobra.Command{
		Use:   "create NAME --kind github|stripe|hmac --secret secret://env/NAME|secret://file/PATH [--namespace NS]",
		Short: "Create a source (admin of the tenant) and print the path its provider delivers to",
		Long: `Create a source (admin of the tenant) and print the path its provider delivers to.

The secret is a reference, never its value: every API process resolves it under
its --secret-env or --secret-dir grant for the source's namespace, as a worker
resolves a step's, and verifies each delivery's signature with it before
reading the delivery.

  github  X-Hub-Signature-256; the event's type is github.EVENT (X-GitHub-Event:
          github.push), its id X-GitHub-Delivery, its data the payload
  stripe  Stripe-Signature (5 minutes' tolerance); the event's type, id and
          created time are the Stripe event's, its data the whole event
  hmac    X-Signature-256: sha256=HEX, an HMAC-SHA256 of the body, which is
          what orrery events publish sends: {"type", "id", "data", "time"}`,
		Example: `  orrery sources create github --kind github --secret secret://env/GITHUB_HOOK_SECRET
  orrery serve --secret-env default/default=GITHUB_HOOK_SECRET ...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.sourceClient().CreateSource(cmd.Context(), connect.NewRequest(&orreryv1.CreateSourceRequest{
				Name: args[0], Kind: kind, Secret: secret, Namespace: namespace}))
			if err != nil {
				return err
			}
			s := res.Msg.GetSource()
			fmt.Fprintf(cmd.OutOrStdout(), "source %s (%s): deliver to POST %s%s\n", s.GetName(), s.GetKind(), g.baseURL(), s.GetHookPath())
			return nil
		},
	}
	create.Flags().StringVar(&kind, "kind", "", "how deliveries are signed and read: github, stripe or hmac")
	create.Flags().StringVar(&secret, "secret", "", "the signing secret, as a reference: secret://env/NAME or secret://file/PATH")
	create.Flags().StringVar(&namespace, "namespace", "default", "the namespace whose secret grants resolve the secret")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the tenant's sources",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := g.sourceClient().ListSources(cmd.Context(), connect.NewRequest(&orreryv1.ListSourcesRequest{}))
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKIND\tNAMESPACE\tSECRET\tPATH")
			for _, s := range res.Msg.GetSources() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.GetName(), s.GetKind(), s.GetNamespace(), s.GetSecret(), s.GetHookPath())
			}
			return tw.Flush()
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a source (admin of the tenant): its deliveries are refused from then on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.sourceClient().DeleteSource(cmd.Context(), connect.NewRequest(&orreryv1.DeleteSourceRequest{Name: args[0]})); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted source %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, del)
	return cmd
}
