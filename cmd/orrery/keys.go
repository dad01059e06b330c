package main

import (
	"context"
	"errors"
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
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/store"
)

// devKeyFile is where `orrery dev` keeps its admin key, in its data dir;
// client commands started from the project folder find it there.
const devKeyFile = "api-key"

// devServerFile is where `orrery dev` records the address it serves on,
// in its data dir; client commands started from the project folder use it
// when neither --server (ORRERY_SERVER) nor a login names one.
const devServerFile = "server"

// devWorkerKeyFile is where `orrery dev` keeps the worker key of the
// Python example worker (examples/workers/python), in its data dir.
const devWorkerKeyFile = "worker-key"

func newKeysCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "API keys of your tenant: create, list, revoke (create --db works on the database, to bootstrap a deployment)"}
	var dbs dbFlags
	var tenant, principal, role string
	var expires time.Duration
	var createTenant, systemAdmin bool
	var types, namespaces []string
	create := &cobra.Command{
		Use:   "create --principal NAME --role none|reader|editor|admin|worker|publisher [--type T]... [--namespace NS]... [--expires D] [--tenant NAME] [--system-admin] [--db URL [--create-tenant]]",
		Short: "Create an API key and print it once (the server keeps only its hash); over the API unless --db is given",
		Long: "Create an API key and print it once on stdout (its prefix, principal and role go to stderr).\n\n" +
			"--role is the key's tenant-wide role; with none, the key acts only where its principal is granted a role\n" +
			"(orrery grants create). With worker, the key is a remote worker's: it may claim, renew and report attempts of\n" +
			"the steps of its --type (run: {worker: TYPE}; \"*\" for any) in its --namespace (default all), and nothing else.\n" +
			"With publisher, it may publish events to its tenant (orrery events publish) and nothing else.\n" +
			"Without --db it is created over the API: an admin key of the tenant is needed, and a\n" +
			"system admin key for --tenant (another tenant) or --system-admin.\n" +
			"With --db (or ORRERY_DB) it is created on the database directly: how a deployment gets its first key.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := access.ParseKeyRole(role)
			if err != nil {
				return fmt.Errorf("--role %q: want none, reader, editor, admin, worker or publisher", role)
			}
			if expires < 0 {
				return fmt.Errorf("--expires %s: must not be negative", expires)
			}
			if dbs.db == "" {
				if cmd.Flags().Changed("create-tenant") {
					return errors.New("--create-tenant needs --db; over the API, create the tenant with `orrery tenants create`")
				}
				req := &orreryv1.CreateAPIKeyRequest{Principal: principal, Role: string(r), SystemAdmin: systemAdmin,
					WorkerTypes: types, WorkerNamespaces: namespaces}
				if cmd.Flags().Changed("tenant") {
					req.Tenant = tenant
				}
				if expires > 0 {
					req.ExpiresIn = durationpb.New(expires)
				}
				res, err := g.accessClient().CreateAPIKey(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				k := res.Msg.GetKey()
				fmt.Fprintf(cmd.ErrOrStderr(), "key %s for %s (%s%s%s)%s; shown once:\n", k.GetPrefix(), k.GetPrincipal(), k.GetRole(),
					systemText(k.GetSystemAdmin()), workerText(k.GetWorkerTypes(), k.GetWorkerNamespaces()), expiresText(k.GetExpiresAt()))
				fmt.Fprintln(cmd.OutOrStdout(), res.Msg.GetSecret())
				return nil
			}
			state, _, closeAll, err := dbs.pools(cmd.Context(), store.Options{})
			if err != nil {
				return err
			}
			defer closeAll()
			secret, key, err := access.New(state).Create(cmd.Context(), access.NewKey{Tenant: tenant, Principal: principal, Role: r,
				SystemAdmin: systemAdmin, TTL: expires, CreatedBy: "orrery keys create", CreateTenant: createTenant,
				WorkerTypes: types, WorkerNamespaces: namespaces})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "key %s for %s (%s%s%s) in tenant %s; shown once:\n", key.Prefix, principal, r, systemText(systemAdmin),
				workerText(types, namespaces), tenant)
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			return nil
		},
	}
	dbs.register(create.Flags())
	create.Flags().StringVar(&tenant, "tenant", "default", "the key's tenant (over the API: default the caller's; naming one needs a system admin key)")
	create.Flags().BoolVar(&createTenant, "create-tenant", false, "create the tenant if it does not exist (with --db)")
	create.Flags().BoolVar(&systemAdmin, "system-admin", false, "the key may also create and list tenants and make keys in any tenant")
	create.Flags().StringVar(&principal, "principal", "", "who the key stands for (recorded on every change it makes)")
	create.Flags().StringVar(&role, "role", "", "the key's tenant-wide role: none, reader, editor or admin; or worker (a remote worker's key) or publisher (publishes events)")
	create.Flags().StringArrayVar(&types, "type", nil, "a worker key's step type (run: {worker: TYPE}; \"*\" for any); repeat for more")
	create.Flags().StringArrayVar(&namespaces, "namespace", nil, "a worker key's namespace (default: all); repeat for more")
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.GetPrefix(), k.GetPrincipal(),
					k.GetRole()+systemText(k.GetSystemAdmin())+workerText(k.GetWorkerTypes(), k.GetWorkerNamespaces()), ts(k.GetCreatedAt()),
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

// workerText is a worker key's scope, as key lines show it.
func workerText(types, namespaces []string) string {
	if len(types) == 0 {
		return ""
	}
	out := ", types " + strings.Join(types, ",")
	if len(namespaces) > 0 {
		out += " in " + strings.Join(namespaces, ",")
	}
	return out
}

func systemText(system bool) string {
	if system {
		return ", system admin"
	}
	return ""
}

func expiresText(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return ", expires " + ts(t)
}

// devKey returns the admin key (admin of the default tenant and system
// admin) of the dev stack in dataDir, creating one (and printing it once,
// on a line of its own) the first time or when the stored one no longer
// works (a new database) or is not a system admin (an older dev stack).
func devKey(ctx context.Context, pool *pgxpool.Pool, dataDir string, out io.Writer, log *slog.Logger) error {
	keys := access.New(pool)
	path := filepath.Join(dataDir, devKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		// A key from before system admins existed is replaced, so that the
		// dev key can read /metrics and manage tenants.
		if p, err := keys.Verify(ctx, strings.TrimSpace(string(b))); err == nil && p.SystemAdmin {
			log.Info("admin API key in " + path + " (client commands from this folder use it)")
			return nil
		}
	}
	secret, _, err := keys.Create(ctx, access.NewKey{Tenant: "default", Principal: "dev-admin", Role: access.Admin, SystemAdmin: true, CreatedBy: "orrery-dev"})
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

// devWorkerKey returns the path of the worker key the example Python
// worker uses (types invoice), creating the key the first time or when the
// stored one no longer works (a new database).
func devWorkerKey(ctx context.Context, pool *pgxpool.Pool, dataDir string) (string, error) {
	keys := access.New(pool)
	path := filepath.Join(dataDir, devWorkerKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		if p, err := keys.Verify(ctx, strings.TrimSpace(string(b))); err == nil && p.Worker != nil {
			return path, nil
		}
	}
	secret, _, err := keys.Create(ctx, access.NewKey{Tenant: "default", Principal: "dev-python-worker", Role: access.Worker,
		WorkerTypes: []string{"invoice"}, CreatedBy: "orrery-dev"})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("--data-dir: write the worker key: %w", err)
	}
	return path, nil
}
