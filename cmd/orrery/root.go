package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// globals are the flags every command shares.
type globals struct {
	logLevel string
	server   string
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
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error (env ORRERY_LOG_LEVEL)")
	pf.StringVar(&g.server, "server", "http://127.0.0.1:8080", "API address for client commands (env ORRERY_SERVER)")
	root.AddCommand(newServeCmd(g), newDevCmd(g), newMigrateCmd(g), newJobsCmd(g), newScheduleCmd(g), newValidateCmd(), newWorkerCmd(g), newRunsCmd(g), newDLQCmd(g), newClusterCmd(g), newApplyCmd(g), newSchemaCmd())
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

func (g *globals) logger() *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
