package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/migrations"
)

// dbFlags name the databases: Orrery's state, and the queue databases
// of River's tables (one for every queue, or one per queue named).
type dbFlags struct {
	db      string
	queueDB []string
}

func (f *dbFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.db, "db", "", "state database URL, PostgreSQL or CockroachDB (env ORRERY_DB)")
	fs.StringArrayVar(&f.queueDB, "queue-db", nil, "PostgreSQL URL for River's queue tables, default --db; NAME=postgres://... for one queue's (repeatable; env ORRERY_QUEUE_DB holds one value)")
}

// queueURLs checks the flags and says where River's tables are: the
// default database's URL, and those of the queues placed elsewhere.
func (f *dbFlags) queueURLs() (def string, byQueue map[string]string, err error) {
	if f.db == "" {
		return "", nil, errors.New("--db is required (or ORRERY_DB): postgres://user@host:5432/orrery")
	}
	def, byQueue = f.db, map[string]string{}
	seenDefault := false
	for _, v := range f.queueDB {
		if v == "" {
			continue // an empty ORRERY_QUEUE_DB: the default
		}
		name, url, named := strings.Cut(v, "=")
		if !named || !(strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://")) {
			// A URL or a key=value DSN for every queue.
			if seenDefault {
				return "", nil, fmt.Errorf("--queue-db %q: a second database for every queue; name the queue: --queue-db NAME=URL", v)
			}
			seenDefault, def = true, v
			continue
		}
		if err := dag.ValidateName(name); err != nil {
			return "", nil, fmt.Errorf("--queue-db %s=...: queue name: %w", name, err)
		}
		if _, dup := byQueue[name]; dup {
			return "", nil, fmt.Errorf("--queue-db: queue %q given twice", name)
		}
		byQueue[name] = url
	}
	return def, byQueue, nil
}

// pools checks the flags, then opens the state pool and each queue
// database's (one pool per distinct URL; the state's when it is one).
func (f *dbFlags) pools(ctx context.Context, opts store.Options) (state *pgxpool.Pool, queues dispatch.QueueDBs, closeAll func(), err error) {
	def, byQueue, err := f.queueURLs()
	if err != nil {
		return nil, queues, nil, err
	}
	if state, err = store.Open(ctx, f.db, opts); err != nil {
		return nil, queues, nil, fmt.Errorf("--db: %w", err)
	}
	open := map[string]*pgxpool.Pool{f.db: state}
	closeAll = func() {
		for _, p := range open {
			p.Close()
		}
	}
	pool := func(url string) (*pgxpool.Pool, error) {
		if p, ok := open[url]; ok {
			return p, nil
		}
		p, err := store.Open(ctx, url, opts)
		if err != nil {
			return nil, err
		}
		open[url] = p
		return p, nil
	}
	if queues.Default, err = pool(def); err != nil {
		closeAll()
		return nil, queues, nil, fmt.Errorf("--queue-db: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(byQueue)) {
		p, err := pool(byQueue[name])
		if err != nil {
			closeAll()
			return nil, queues, nil, fmt.Errorf("--queue-db %s=...: %w", name, err)
		}
		if queues.ByQueue == nil {
			queues.ByQueue = map[string]*pgxpool.Pool{}
		}
		queues.ByQueue[name] = p
	}
	return state, queues, closeAll, nil
}

func newServeCmd(g *globals) *cobra.Command {
	var dbs dbFlags
	var st stackFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a scheduler node and the API against an existing database (migrate it first)",
		Long: `serve runs one Orrery node: the API, the shard leases, the scheduler that
fires the jobs of the shards it owns, and the reaper of lapsed task leases.
With --worker QUEUE=N it also runs worker pools in-process. Run several
serve processes against one database to spread the shards.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			queues, err := st.queues()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			popts, err := st.poolOptions()
			if err != nil {
				return err
			}
			state, queueDBs, closeAll, err := dbs.pools(ctx, popts)
			if err != nil {
				return err
			}
			defer closeAll()
			g.watchOutage(state)
			if err := requireMigrated(ctx, state, queueDBs); err != nil {
				return err
			}
			return runStack(ctx, g.logger(), state, queueDBs, st, queues, nil, nil)
		},
	}
	dbs.register(cmd.Flags())
	st.register(cmd.Flags(), true)
	return cmd
}

// requireMigrated refuses to serve an old schema.
func requireMigrated(ctx context.Context, state *pgxpool.Pool, queues dispatch.QueueDBs) error {
	list, err := migrations.List(ctx, state)
	if err != nil {
		return err
	}
	for _, m := range list {
		if !m.Applied {
			return fmt.Errorf("the state database lacks migration %d (%s): run `orrery migrate up`", m.Version, m.Name)
		}
	}
	for _, queue := range queues.Pools() {
		if v, err := migrations.QueueVersion(ctx, queue); err != nil || v == 0 {
			return fmt.Errorf("the queue database %s has no River tables: run `orrery migrate up` (%v)", queue.Config().ConnConfig.Database, err)
		}
	}
	return nil
}
