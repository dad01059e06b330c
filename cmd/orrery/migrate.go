package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
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
	recount := &cobra.Command{
		Use:   "recount-usage",
		Short: "Count again what every tenant stores, for its storage quotas (run it while no serve writes)",
		Long: `Count again, from the tables, what every tenant stores (live jobs, the
bytes of their definitions, runs and tasks), as its storage quotas count
it. Counts are kept as each write commits; nodes older than migration
00021 that kept writing after it (a rolling upgrade) left theirs out.
Run it while no serve process writes: a tenant's first job or run in a
shard written meanwhile may be counted twice or not at all.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			state, _, closeAll, err := dbs.pools(ctx, store.Options{})
			if err != nil {
				return err
			}
			defer closeAll()
			if err := usage.Recount(ctx, state); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "orrery: counted again what every tenant stores")
			return nil
		},
	}
	cmd.AddCommand(up, status, recount)
	return cmd
}
