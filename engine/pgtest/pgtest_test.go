package pgtest_test

import (
	"context"
	"testing"

	"github.com/orrery-dev/orrery/engine/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestFreshDatabaseIsMigratedAndSerializable(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	var iso string
	var shards int
	ctx := context.Background()
	if err := pool.QueryRow(ctx, "SHOW default_transaction_isolation").Scan(&iso); err != nil {
		t.Fatal(err)
	}
	if iso != "serializable" {
		t.Fatalf("isolation %q, want serializable", iso)
	}
	if err := pool.QueryRow(ctx, "SELECT shard_count FROM cluster_settings").Scan(&shards); err != nil {
		t.Fatal(err)
	}
	if shards != 64 {
		t.Fatalf("shard_count %d, want 64", shards)
	}
}

func TestDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := pgtest.Pool(t), pgtest.Pool(t)
	ctx := context.Background()
	if _, err := a.Exec(ctx, "INSERT INTO namespaces (tenant_id, name) VALUES ('00000000-0000-0000-0000-000000000001', 'only-in-a')"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM namespaces WHERE name = 'only-in-a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("a row written in one test's database is visible in another's")
	}
}
