// Package migrations holds Orrery's schema as numbered SQL files, embedded,
// and applies them with goose. River's own tables are migrated separately,
// with rivermigrate, in the queue database.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var files embed.FS

// FS is the embedded migration files.
func FS() embed.FS { return files }

// Status is one migration's state.
type Status struct {
	Version int64
	Name    string
	Applied bool
}

func provider(pool *pgxpool.Pool) (*goose.Provider, *sql.DB, error) {
	db := stdlib.OpenDBFromPool(pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithVerbose(false))
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrations: %w", err)
	}
	return p, db, nil
}

// Up applies every pending migration of Orrery's schema and returns the
// versions it applied.
func Up(ctx context.Context, pool *pgxpool.Pool) ([]int64, error) {
	p, db, err := provider(pool)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: up: %w", err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// List reports every known migration and whether it is applied.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Status, error) {
	p, db, err := provider(pool)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		out = append(out, Status{Version: s.Source.Version, Name: s.Source.Path, Applied: s.State == goose.StateApplied})
	}
	return out, nil
}

// QueueUp applies River's migrations to the queue database.
func QueueUp(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: discardLogger()})
	if err != nil {
		return 0, fmt.Errorf("migrations: river: %w", err)
	}
	res, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return 0, fmt.Errorf("migrations: river up: %w", err)
	}
	return len(res.Versions), nil
}

// QueueVersion is the highest River migration applied to the queue database
// (0 when none).
func QueueVersion(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: discardLogger()})
	if err != nil {
		return 0, fmt.Errorf("migrations: river: %w", err)
	}
	versions, err := m.ExistingVersions(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: river status: %w", err)
	}
	if len(versions) == 0 {
		return 0, nil
	}
	return versions[len(versions)-1].Version, nil
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
