package run_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/migrations"
)

// An attempt running across migration 40 (the running attempt moved from
// its attempts row into its task's row) is the same attempt on both sides
// of it, down and up again, and its report (once the schema is today's
// again) still ends it.
func TestARunningAttemptAcrossMigration40(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	x := newInTxOn(t, tx, "w-upgrade") // committed below: migrations run in their own transactions
	a := x.start(x.run(step("only")), "only")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	attempt := func() string {
		var s string
		if err := pool.QueryRow(ctx, `SELECT COALESCE(string_agg(id::text || ' ' || number || ' ' || fencing_token || ' ' || worker || ' ' || outcome, ';'), '')
			FROM attempts WHERE task_id = $1`, a.Call.TaskID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	want := a.ID.String() + " 1 " + strconv.FormatInt(a.Call.FencingToken, 10) + " w-upgrade running"

	if _, err := p.DownTo(ctx, 39); err != nil {
		t.Fatal(err)
	}
	if got := attempt(); got != want {
		t.Fatalf("after down: attempts %q, want %q", got, want)
	}
	if _, err := p.UpTo(ctx, 40); err != nil {
		t.Fatal(err)
	}
	if got := attempt(); got != "" {
		t.Fatalf("after up: attempts %q, want none (the running attempt is in its task's row)", got)
	}
	var inTask string
	if err := pool.QueryRow(ctx, `SELECT attempt_id::text || ' ' || attempt_worker || ' ' || (attempt_started_at IS NOT NULL) FROM tasks WHERE id = $1`,
		a.Call.TaskID).Scan(&inTask); err != nil {
		t.Fatal(err)
	}
	if inTask != a.ID.String()+" w-upgrade true" {
		t.Fatalf("after up: the task's attempt %q", inTask)
	}

	// The report is written by today's code, on today's schema.
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) }) // a failure must not leave the pool waiting for it
	x.tx = tx
	if accepted := x.finish(report(a, true)); !accepted[0] {
		t.Fatal("the report of the attempt that ran across the migration was refused")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := attempt(), a.ID.String()+" 1 "+strconv.FormatInt(a.Call.FencingToken, 10)+" w-upgrade succeeded"; got != want {
		t.Fatalf("after the report: attempts %q, want %q", got, want)
	}
}
