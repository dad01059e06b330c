package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/examples"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgcluster"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/migrations"
)

func newDevCmd(g *globals) *cobra.Command {
	var dataDir string
	var st stackFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything on this machine: a private PostgreSQL, migrations, the example jobs and the API",
		Long: `dev starts a private PostgreSQL cluster under --data-dir (initialized on first
use, as the postgres user when run as root), applies Orrery's and River's
migrations, loads the example jobs, and serves the API on --addr until
Ctrl-C. A second run reuses the data.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := g.logger()
			if err := os.MkdirAll(dataDir, 0o755); err != nil {
				return fmt.Errorf("--data-dir: %w", err)
			}
			if err := os.Chmod(dataDir, 0o755); err != nil { // the postgres user must reach pg/ inside
				return fmt.Errorf("--data-dir: %w", err)
			}
			cluster, err := pgcluster.Start(ctx, pgcluster.Config{Dir: filepath.Join(dataDir, "pg"), Logger: log})
			if err != nil {
				return err
			}
			defer func() {
				log.Info("stopping PostgreSQL")
				if err := cluster.Stop(); err != nil {
					log.Error("stop PostgreSQL", "err", err)
				}
			}()
			popts, err := st.poolOptions()
			if err != nil {
				return err
			}
			pool, err := store.Open(ctx, cluster.DSN(""), popts)
			if err != nil {
				return err
			}
			defer pool.Close()
			g.watchOutage(pool)
			applied, err := migrations.Up(ctx, pool)
			if err != nil {
				return err
			}
			if _, err := migrations.QueueUp(ctx, pool); err != nil {
				return err
			}
			log.Info("schema up to date", "applied_now", len(applied))
			jobs, err := job.New(ctx, pool, log)
			if err != nil {
				return err
			}
			// The examples call the dev sink on this stack's own address.
			if st.addr, err = resolveAddr(st.addr); err != nil {
				return fmt.Errorf("--addr: %w", err)
			}
			// Client commands from this folder find this address (as
			// they find its key), whatever --addr is.
			if err := os.WriteFile(filepath.Join(dataDir, devServerFile), []byte("http://"+st.addr+"\n"), 0o644); err != nil {
				return fmt.Errorf("--data-dir: record the address: %w", err)
			}
			devSandbox(cmd.Flags(), &st)
			if err := loadExamples(cmd, jobs, sinkBase(st.addr), log); err != nil {
				return err
			}
			workerKey := "ORRERY_KEY="
			if st.auth == "keys" {
				if err := devKey(ctx, pool, dataDir, cmd.OutOrStdout(), log); err != nil {
					return err
				}
				path, err := devWorkerKey(ctx, pool, dataDir)
				if err != nil {
					return err
				}
				workerKey = "ORRERY_KEY=$(cat " + path + ")"
			}
			queues, err := st.queues()
			if err != nil {
				return err
			}
			if _, ok := os.LookupEnv("HOOK_TOKEN"); !ok {
				// The nightly example's report step sends secret://env/HOOK_TOKEN.
				_ = os.Setenv("HOOK_TOKEN", "Bearer dev-token")
				log.Info("HOOK_TOKEN was not set; using a dev value for the examples' secret://env/HOOK_TOKEN")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "orrery dev: database %s\norrery dev: try `orrery jobs list` and `orrery runs list` (Ctrl-C stops)\n", cluster.RedactedDSN(""))
			fmt.Fprintf(cmd.OutOrStdout(), "orrery dev: the remote step of examples/remote-invoice.yaml waits for a worker; start the Python one with\n"+
				"  ORRERY_URL=http://%s %s python3 examples/workers/python/example.py\n", st.addr, workerKey)
			return runStack(ctx, log, pool, dispatch.QueueDBs{Default: pool}, st, queues, devHandlers(log), map[string]http.Handler{devSinkPath: devSink(log)})
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", ".orrery", "folder for the private database (env ORRERY_DATA_DIR)")
	st.register(cmd.Flags(), true)
	st.workers = []string{"default=10", "etl=10", "warehouse=4"}
	// The sandbox flags' dev defaults (devSandbox), for --help.
	for name, def := range map[string]string{"allow-command": "[*]", "secret-env": "[default/analytics=HOOK_TOKEN]", "command-user": "nobody, when run as root",
		"allow-egress": "loopback, and the dev sink's address"} {
		f := cmd.Flags().Lookup(name)
		f.DefValue, f.Usage = def, strings.TrimSuffix(f.Usage, "; none by default")
	}
	return cmd
}

// devSandbox gives the worker sandbox flags the user did not set what
// the examples need: any command, HOOK_TOKEN for the default tenant's namespace analytics, and
// loopback (and the dev sink's own address) for webhooks. A flag the user
// set (or its ORRERY_ variable) replaces its default, as on a production
// worker. Call it once st.addr is final.
func devSandbox(fs *pflag.FlagSet, st *stackFlags) {
	if !fs.Changed("allow-command") {
		st.allowCommand = []string{"*"}
	}
	if !fs.Changed("command-user") && os.Geteuid() == 0 {
		// Steps are anyone's code: not root, so that they cannot read the
		// admin key, the database's password or this process.
		st.commandUser = "nobody"
	}
	if !fs.Changed("secret-env") {
		// The nightly example's report step sends secret://env/HOOK_TOKEN.
		st.secretEnv = []string{"default/analytics=HOOK_TOKEN"}
	}
	if !fs.Changed("allow-egress") {
		st.allowEgress = []string{"127.0.0.0/8", "::1/128"}
		// The sink's host, as sinkBase names it: the API's, or 127.0.0.1
		// for a wildcard address.
		host, _, _ := net.SplitHostPort(st.addr)
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else if host != "" {
			ips, _ = net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
		}
		for _, ip := range ips {
			if ip = ip.Unmap(); !ip.IsLoopback() && !ip.IsUnspecified() {
				st.allowEgress = append(st.allowEgress, netip.PrefixFrom(ip, ip.BitLen()).String())
			}
		}
	}
}

// loadExamples applies the example jobs in one transaction: created,
// updated or unchanged, and recorded as applied from examples/. Their
// webhooks call the dev sink at sink.
func loadExamples(cmd *cobra.Command, jobs *job.Service, sink string, log *slog.Logger) error {
	names, err := fs.Glob(examples.FS(), "*.yaml")
	if err != nil {
		return err
	}
	sort.Strings(names)
	var items []job.Item
	for _, name := range names {
		data, err := examples.FS().ReadFile(name)
		if err != nil {
			return err
		}
		data = bytes.ReplaceAll(data, []byte(exampleSink), []byte(sink))
		docs, es := dag.Decode("examples/"+name, data)
		if len(es) > 0 {
			return es
		}
		for _, d := range docs {
			items = append(items, job.Item{Resource: d.Resource, Source: &job.Source{Path: "examples/" + name}})
		}
	}
	changes, err := jobs.ApplyAll(cmd.Context(), job.Actor{Tenant: job.DefaultTenant, Name: "orrery-dev"}, items, job.PlanOptions{})
	if err != nil {
		return fmt.Errorf("examples: %w", err)
	}
	done := map[string]string{job.ActionCreate: "created", job.ActionUpdate: "updated", job.ActionUnchanged: "unchanged"}
	for _, c := range changes {
		log.Info("example job "+done[c.Action], "job", c.Namespace+"/"+c.Name, "version", c.Job.Version)
	}
	return nil
}
