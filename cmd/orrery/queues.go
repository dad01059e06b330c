package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/store"
)

// newQueuesCmd is `orrery queues`: the bindings of queues to tenants,
// which bound workers (orrery worker --tenant) make on the database; an
// operator with the database's credentials lists and removes them.
func newQueuesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "queues", Short: "Queues bound to tenants (by orrery worker --tenant): list, unbind (on the database, --db)"}
	var dbs dbFlags
	list := &cobra.Command{
		Use:   "bindings --db URL",
		Short: "List the queues bound to tenants, and the bound queue each tenant's tasks go to",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			state, _, closeAll, err := dbs.pools(cmd.Context(), store.Options{})
			if err != nil {
				return err
			}
			defer closeAll()
			rows, err := store.New(state).ListQueueBindings(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tQUEUE\tBOUND QUEUE\tBOUND BY\tSINCE (UTC)")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Tenant, r.Queue, r.BoundQueue, r.BoundBy, r.CreatedAt.UTC().Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		},
	}
	unbind := &cobra.Command{
		Use:   "unbind TENANT QUEUE --db URL",
		Short: "Send a tenant's new tasks of a queue to the queue's shared pool again (a bound worker that starts binds it again)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			state, _, closeAll, err := dbs.pools(cmd.Context(), store.Options{})
			if err != nil {
				return err
			}
			defer closeAll()
			if err := dispatch.Unbind(cmd.Context(), state, args[0], args[1], "orrery queues unbind"); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "unbound queue %s of tenant %s\n", args[1], args[0])
			return nil
		},
	}
	dbs.register(list.Flags())
	dbs.register(unbind.Flags())
	cmd.AddCommand(list, unbind)
	return cmd
}
