package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orrery-dev/orrery/internal/store"
)

// globals are the flags every command shares, and the process's logger.
type globals struct {
	logLevel string
	server   string
	apiKey   string
	log      *slog.Logger
	outage   *store.Outage
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "orrery",
		Short:         "Orrery: a distributed job scheduler and DAG workflow engine",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags()); err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
			}
			g.applyLogin(cmd.Flags().Changed("server"))
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error (env ORRERY_LOG_LEVEL)")
	pf.StringVar(&g.server, "server", "http://127.0.0.1:8080", "API address for client commands (env ORRERY_SERVER; default the one `orrery login` kept, else this)")
	pf.StringVar(&g.apiKey, "api-key", "", "API key for client commands (env ORRERY_API_KEY; default the one `orrery login` kept for the server, else the one `orrery dev` wrote in its data dir, .orrery/api-key)")
	root.AddCommand(newServeCmd(g), newDevCmd(g), newMigrateCmd(g), newJobsCmd(g), newScheduleCmd(g), newValidateCmd(), newWorkerCmd(g), newRunsCmd(g), newDLQCmd(g), newClusterCmd(g), newApplyCmd(g), newSchemaCmd(), newKeysCmd(g), newTenantsCmd(g), newGrantsCmd(g), newProfilesCmd(g), newAuditCmd(g), newAlertsCmd(g), newQueuesCmd(), newEventsCmd(g), newSourcesCmd(g))
	root.AddCommand(newLoginCmds(g)...)
	return root
}

// applyEnv fills every flag the user did not set from ORRERY_<FLAG>
// (dashes become underscores): --queue-db from ORRERY_QUEUE_DB. A value
// the flag refuses is an error naming the variable.
func applyEnv(fs *pflag.FlagSet) error {
	var first error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || first != nil {
			return
		}
		name := "ORRERY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if err := fs.Set(f.Name, v); err != nil {
				first = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	return first
}

// logger is the process's logger (--log-level was checked before any
// command ran). A database outage is logged once when it starts and once
// when it ends (watchOutage), not by every component at every retry.
func (g *globals) logger() *slog.Logger {
	if g.log == nil {
		var level slog.Level
		_ = level.UnmarshalText([]byte(g.logLevel))
		var h slog.Handler
		h, g.outage = store.OutageHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		g.log = slog.New(h)
	}
	return g.log
}

// watchOutage lets the logger tell when the database is back.
func (g *globals) watchOutage(pool *pgxpool.Pool) {
	g.logger()
	g.outage.Watch(pool.Ping)
}
