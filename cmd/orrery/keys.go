package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/engine/access"
	"github.com/orrery-dev/orrery/engine/store"
)

// devKeyFile is where `orrery dev` keeps its admin key, in its data dir;
// client commands started from the project folder find it there.
const devKeyFile = "api-key"

func newKeysCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "API keys of your tenant: create, list, revoke (create --db works on the database, to bootstrap a deployment)"}
	var dbs dbFlags
	var tenant, principal, role string
	var expires time.Duration
	var createTenant bool
	create := &cobra.Command{
		Use:   "create --principal NAME --role reader|editor|admin [--expires D] [--db URL --tenant NAME [--create-tenant]]",
		Short: "Create an API key and print it once (the server keeps only its hash); over the API, in your tenant, unless --db is given",
		Long: "Create an API key and print it once on stdout (its prefix, principal and role go to stderr).\n\n" +
			"Without --db it is created over the API (an admin key is needed) in the caller's tenant.\n" +
			"With --db (or ORRERY_DB) it is created on the database directly, in --tenant: how a deployment gets its first key.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := access.ParseRole(role)
			if err != nil {
				return fmt.Errorf("--role %q: want reader, editor or admin", role)
			}
			if expires < 0 {
				return fmt.Errorf("--expires %s: must not be negative", expires)
			}
			if dbs.db == "" {
				for _, f := range []string{"tenant", "create-tenant"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s needs --db: over the API a key is created in the caller's tenant", f)
					}
				}
				req := &orreryv1.CreateAPIKeyRequest{Principal: principal, Role: string(r)}
				if expires > 0 {
					req.ExpiresIn = durationpb.New(expires)
				}
				res, err := g.accessClient().CreateAPIKey(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				k := res.Msg.GetKey()
				fmt.Fprintf(cmd.ErrOrStderr(), "key %s for %s (%s)%s; shown once:\n", k.GetPrefix(), k.GetPrincipal(), k.GetRole(), expiresText(k.GetExpiresAt()))
				fmt.Fprintln(cmd.OutOrStdout(), res.Msg.GetSecret())
				return nil
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
	create.Flags().StringVar(&tenant, "tenant", "default", "the key's tenant (with --db; over the API, the caller's)")
	create.Flags().BoolVar(&createTenant, "create-tenant", false, "create the tenant if it does not exist (with --db)")
	create.Flags().StringVar(&principal, "principal", "", "who the key stands for (recorded on every change it makes)")
	create.Flags().StringVar(&role, "role", "", "reader, editor or admin")
	create.Flags().DurationVar(&expires, "expires", 0, "lifetime (0: never expires)")

	list := &cobra.Command{
		Use:   "list",
		Short: "List your tenant's API keys (prefixes, never secrets), oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := g.accessClient().ListAPIKeys(cmd.Context(), connect.NewRequest(&orreryv1.ListAPIKeysRequest{}))
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PREFIX\tPRINCIPAL\tROLE\tCREATED (UTC)\tCREATED BY\tEXPIRES\tREVOKED")
			for _, k := range res.Msg.GetKeys() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.GetPrefix(), k.GetPrincipal(), k.GetRole(), ts(k.GetCreatedAt()),
					k.GetCreatedBy(), ts(k.GetExpiresAt()), ts(k.GetRevokedAt()))
			}
			return tw.Flush()
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke PREFIX",
		Short: "Revoke one of your tenant's API keys, named by its prefix (ork_..., as `keys list` shows it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.accessClient().RevokeAPIKey(cmd.Context(), connect.NewRequest(&orreryv1.RevokeAPIKeyRequest{Prefix: args[0]})); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked key %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func expiresText(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return ", expires " + ts(t)
}

// devKey returns the admin key of the dev stack in dataDir, creating one
// (and printing it once, on a line of its own) the first time or when the
// stored one no longer works (a new database).
func devKey(ctx context.Context, pool *pgxpool.Pool, dataDir string, out io.Writer, log *slog.Logger) error {
	keys := access.NewKeys(pool)
	path := filepath.Join(dataDir, devKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		if _, err := keys.Verify(ctx, strings.TrimSpace(string(b))); err == nil {
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
