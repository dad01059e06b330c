// Package pgtest gives tests a real PostgreSQL: one throwaway cluster per
// test binary, started on a free port by TestMain, with Orrery's migrations
// applied once to a template database. A test of code that writes in its
// caller's transaction takes Tx: a transaction on a database the binary's
// tests share, rolled back at the test's end. A test that needs commits,
// several connections or processes takes Pool: a fresh database copied
// from the template. Either way tests run in parallel without sharing
// rows.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/pgcluster"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/migrations"
)

const template = "orrery_template"

var (
	cluster *pgcluster.Cluster
	mu      sync.Mutex // CREATE DATABASE ... TEMPLATE wants the template to itself
	counter atomic.Int64
)

// Main starts the cluster, runs the tests and stops the cluster. Call it
// from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	stop, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// Start starts the cluster and migrates the template, for a TestMain that
// does more than Main; call stop when the tests are done.
func Start() (stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "orrery-pg-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cluster, err = pgcluster.Start(ctx, pgcluster.Config{Dir: dir, Database: template, Ephemeral: true,
		// As CockroachDB: every transaction serializable, so the tests
		// exercise the retry paths (CockroachDB runs every transaction serializable; README, "Isolation").
		Settings: map[string]string{"default_transaction_isolation": "serializable"}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop = func() {
		_ = cluster.Stop()
		os.RemoveAll(dir)
	}
	if err := migrateTemplate(ctx); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

func migrateTemplate(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, cluster.DSN(template))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	_, err = migrations.QueueUp(ctx, pool)
	return err
}

// DSN creates a fresh, migrated database for t and returns its connection
// string; the database is dropped when t ends.
func DSN(t testing.TB) string {
	t.Helper()
	dsn, drop, err := NewDatabase()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	return dsn
}

// NewDatabase creates a fresh, migrated database (for Example functions,
// which have no testing.TB) and returns its connection string and a
// function that drops it.
func NewDatabase() (dsn string, drop func(), err error) {
	if cluster == nil {
		return "", nil, fmt.Errorf("pgtest: no cluster; call pgtest.Main from TestMain")
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), counter.Add(1))
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, cluster.DSN("postgres"))
	if err != nil {
		return "", nil, err
	}
	defer admin.Close(ctx)
	mu.Lock()
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+template)
	mu.Unlock()
	if err != nil {
		return "", nil, fmt.Errorf("pgtest: create database: %w", err)
	}
	return cluster.DSN(name), func() {
		conn, err := pgx.Connect(ctx, cluster.DSN("postgres"))
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}, nil
}

// Pool is DSN plus a pool that closes when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := store.Open(context.Background(), DSN(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
