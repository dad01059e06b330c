package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orrery-dev/orrery/api"
	"github.com/orrery-dev/orrery/engine/job"
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

// pools opens the state pool and, when it differs, the queue pool.
func (f *dbFlags) pools(ctx context.Context) (state, queue *pgxpool.Pool, closeAll func(), err error) {
	if state, err = store.Open(ctx, f.db, 0); err != nil {
		return nil, nil, nil, fmt.Errorf("--db: %w", err)
	}
	if f.queueDB == f.db {
		return state, state, state.Close, nil
	}
	if queue, err = store.Open(ctx, f.queueDB, 0); err != nil {
		state.Close()
		return nil, nil, nil, fmt.Errorf("--queue-db: %w", err)
	}
	return state, queue, func() { queue.Close(); state.Close() }, nil
}

func newServeCmd(g *globals) *cobra.Command {
	var dbs dbFlags
	var addr string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the API against an existing database (migrate it first with `orrery migrate up`)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := dbs.validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			state, queue, closeAll, err := dbs.pools(ctx)
			if err != nil {
				return err
			}
			defer closeAll()
			if err := requireMigrated(ctx, state, queue); err != nil {
				return err
			}
			return serve(ctx, g.logger(), addr, state)
		},
	}
	dbs.register(cmd.Flags())
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address to serve the API on (env ORRERY_ADDR)")
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

// serve runs the API until ctx ends.
func serve(ctx context.Context, log *slog.Logger, addr string, state *pgxpool.Pool) error {
	jobs, err := job.New(ctx, state, log)
	if err != nil {
		return err
	}
	srv, err := api.Listen(addr, api.NewHandler(api.Services{Jobs: jobs}, log))
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	log.Info("serving the API", "addr", "http://"+srv.Addr())
	return srv.Serve(ctx)
}
