package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orrery-dev/orrery/engine/store"
	"github.com/orrery-dev/orrery/migrations"
)

// dbFlags name the two databases: Orrery's state and River's queue.
type dbFlags struct {
	db      string
	queueDB string
}

func (f *dbFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.db, "db", "", "state database URL, PostgreSQL or CockroachDB (env ORRERY_DB)")
	fs.StringVar(&f.queueDB, "queue-db", "", "PostgreSQL URL for River's queue tables; default --db (env ORRERY_QUEUE_DB)")
}

func (f *dbFlags) validate() error {
	if f.db == "" {
		return errors.New("--db is required (or ORRERY_DB): postgres://user@host:5432/orrery")
	}
	if f.queueDB == "" {
		f.queueDB = f.db
	}
	return nil
}

// pools checks the flags, then opens the state pool and, when it
// differs, the queue pool.
func (f *dbFlags) pools(ctx context.Context, opts store.Options) (state, queue *pgxpool.Pool, closeAll func(), err error) {
	if err := f.validate(); err != nil {
		return nil, nil, nil, err
	}
	if state, err = store.Open(ctx, f.db, opts); err != nil {
		return nil, nil, nil, fmt.Errorf("--db: %w", err)
	}
	if f.queueDB == f.db {
		return state, state, state.Close, nil
	}
	if queue, err = store.Open(ctx, f.queueDB, opts); err != nil {
		state.Close()
		return nil, nil, nil, fmt.Errorf("--queue-db: %w", err)
	}
	return state, queue, func() { queue.Close(); state.Close() }, nil
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
			state, queue, closeAll, err := dbs.pools(ctx, popts)
			if err != nil {
				return err
			}
			defer closeAll()
			g.watchOutage(state)
			if err := requireMigrated(ctx, state, queue); err != nil {
				return err
			}
			return runStack(ctx, g.logger(), state, queue, st, queues, nil, nil)
		},
	}
	dbs.register(cmd.Flags())
	st.register(cmd.Flags(), true)
	return cmd
}

// requireMigrated refuses to serve an old schema.
func requireMigrated(ctx context.Context, state, queue *pgxpool.Pool) error {
	list, err := migrations.List(ctx, state)
	if err != nil {
		return err
	}
	for _, m := range list {
		if !m.Applied {
			return fmt.Errorf("the state database lacks migration %d (%s): run `orrery migrate up`", m.Version, m.Name)
		}
	}
	if v, err := migrations.QueueVersion(ctx, queue); err != nil || v == 0 {
		return fmt.Errorf("the queue database has no River tables: run `orrery migrate up` (%v)", err)
	}
	return nil
}
