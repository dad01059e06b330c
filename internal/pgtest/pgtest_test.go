package pgtest_test

import (
	"context"
	"testing"

	"github.com/orrery-dev/orrery/internal/pgtest"
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

// Orrery's own tables keep to what PostgreSQL and CockroachDB both run: no
// triggers, no functions (River's tables, PostgreSQL only, are River's).
func TestSchemaHasNoTriggersOrFunctions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT 'trigger ' || tgname || ' on ' || tgrelid::regclass::text FROM pg_trigger
		WHERE NOT tgisinternal AND tgrelid::regclass::text NOT LIKE 'river%'
		UNION ALL
		SELECT 'function ' || p.proname FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
		WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND p.proname NOT LIKE 'river%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var what string
		if err := rows.Scan(&what); err != nil {
			t.Fatal(err)
		}
		t.Errorf("%s in the migrated schema", what)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
