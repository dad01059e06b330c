package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orrery-dev/orrery/engine/access"
	"github.com/orrery-dev/orrery/engine/store"
)

// devKeyFile is where `orrery dev` keeps its admin key, in its data dir;
// client commands started from the project folder find it there.
const devKeyFile = "api-key"

func newKeysCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "API keys (create works on the database directly, to bootstrap a deployment)"}
	var dbs dbFlags
	var tenant, principal, role string
	var expires time.Duration
	var createTenant bool
	create := &cobra.Command{
		Use:   "create --db URL --tenant NAME --principal NAME --role reader|editor|admin",
		Short: "Create an API key and print it once (the database keeps only its hash)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := access.ParseRole(role)
			if err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			state, _, closeAll, err := dbs.pools(cmd.Context(), store.Options{})
			if err != nil {
				return err
			}
			defer closeAll()
			secret, key, err := access.NewKeys(state).Create(cmd.Context(), tenant, principal, r, expires, "orrery keys create", createTenant)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "key %s for %s (%s) in tenant %s; shown once:\n", key.Prefix, principal, r, tenant)
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			return nil
		},
	}
	dbs.register(create.Flags())
	create.Flags().StringVar(&tenant, "tenant", "default", "the key's tenant")
	create.Flags().BoolVar(&createTenant, "create-tenant", false, "create the tenant if it does not exist")
	create.Flags().StringVar(&principal, "principal", "", "who the key stands for (recorded on every change it makes)")
	create.Flags().StringVar(&role, "role", "", "reader, editor or admin")
	create.Flags().DurationVar(&expires, "expires", 0, "lifetime (0: never expires)")
	cmd.AddCommand(create)
	return cmd
}

// devKey returns the admin key of the dev stack in dataDir, creating one
// (and printing it once, on a line of its own) the first time or when the
// stored one no longer works (a new database).
func devKey(ctx context.Context, pool *pgxpool.Pool, dataDir string, out io.Writer, log *slog.Logger) error {
	keys := access.NewKeys(pool)
	path := filepath.Join(dataDir, devKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		if _, err := keys.Verify(ctx, string(trimNewline(b))); err == nil {
			log.Info("admin API key in " + path + " (client commands from this folder use it)")
			return nil
		}
	}
	secret, _, err := keys.Create(ctx, "default", "dev-admin", access.Admin, 0, "orrery-dev", false)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("--data-dir: write the admin key: %w", err)
	}
	fmt.Fprintln(out, "admin API key: "+secret)
	log.Info("admin API key stored in " + path + " (client commands from this folder use it; or export ORRERY_API_KEY)")
	return nil
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
