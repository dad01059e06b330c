package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/orrery-dev/orrery/engine/store"
	"github.com/orrery-dev/orrery/migrations"
)

func newMigrateCmd(g *globals) *cobra.Command {
	var dbs dbFlags
	cmd := &cobra.Command{Use: "migrate", Short: "Manage the database schema (Orrery's tables and River's)"}
	dbs.register(cmd.PersistentFlags())
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			state, queues, closeAll, err := dbs.pools(ctx, store.Options{})
			if err != nil {
				return err
			}
			defer closeAll()
			applied, err := migrations.Up(ctx, state)
			if err != nil {
				return err
			}
			river := 0
			for _, queue := range queues.Pools() {
				n, err := migrations.QueueUp(ctx, queue)
				if err != nil {
					return fmt.Errorf("queue database %s: %w", queue.Config().ConnConfig.Database, err)
				}
				river += n
			}
			fmt.Fprintf(cmd.OutOrStdout(), "orrery: applied %d migration(s) %v; river: applied %d\n", len(applied), applied, river)
			return nil
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			state, queues, closeAll, err := dbs.pools(ctx, store.Options{})
			if err != nil {
				return err
			}
			defer closeAll()
			list, err := migrations.List(ctx, state)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, m := range list {
				mark := "pending"
				if m.Applied {
					mark = "applied"
				}
				fmt.Fprintf(out, "%-8s %05d %s\n", mark, m.Version, m.Name)
			}
			for _, queue := range queues.Pools() {
				v, err := migrations.QueueVersion(ctx, queue)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "river    version %d (%s)\n", v, queue.Config().ConnConfig.Database)
			}
			return nil
		},
	}
	cmd.AddCommand(up, status)
	return cmd
}
