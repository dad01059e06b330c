package dispatch

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// An admission pass in a transaction rolled back at the test's end
// (pgtest.Tx): the pass reads the queue's workers and the tenants'
// waiting tasks and writes its marks and River jobs in its caller's
// transaction, so the whole pass is seen before anything commits. Two
// tenants share a queue of two slots (four tasks in flight) by weight,
// one of them held to its quota; a second pass admits nothing more.
func TestAdmitInATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := pgtest.Tx(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	queue := "q-" + uuid.NewString()[:8]
	exec(`INSERT INTO queues (name) VALUES ($1)`, queue)
	exec(`INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at) VALUES (gen_random_uuid(), $1, jsonb_build_object($2::text, 2), now(), now(), now() + interval '1 hour')`,
		t.Name(), queue)
	tenants := map[string]uuid.UUID{}
	for _, tn := range []struct {
		name  string
		quota int
	}{{"a", 0}, {"b", 0}, {"c", 1}} {
		id := uuid.New()
		tenants[tn.name] = id
		exec(`INSERT INTO tenants (id, name, weight, max_concurrency) VALUES ($1, $2, 1, $3)`, id, queue+"-"+tn.name, tn.quota)
		exec(`INSERT INTO namespaces (tenant_id, name) VALUES ($1, 'default')`, id)
		exec(`INSERT INTO jobs (id, tenant_id, namespace, name, description, labels, status, version, spec, shard, created_at, created_by, updated_at, updated_by)
			VALUES ($1, $2, 'default', 'j', '', '{}', 'active', 1, '{}', 0, now(), 'test', now(), 'test')`, id, id)
		exec(`INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at) VALUES ($1, $1, $1, 1, 0, now(), 'manual', 'pending', now())`, id)
		exec(`INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at, ready_at)
			SELECT gen_random_uuid(), $1, $1, 's' || i, 'queued', 0, $2, 3, 0, now(), now(), now() FROM generate_series(1, 5) AS i`, id, queue)
	}
	d, err := New()
	if err != nil {
		t.Fatal(err)
	}
	cfg := AdmitConfig{Aging: DefaultAging, ReserveAfter: DefaultReserveAfter}
	res, _, err := d.admit(ctx, tx, cfg, queue)
	if err != nil || res.Admitted != 4 {
		t.Fatalf("the pass: %+v, %v; want 4 admitted (2 slots, 2 a slot)", res, err)
	}
	admitted := func(tx pgx.Tx) string {
		var s string
		if err := tx.QueryRow(ctx, `SELECT string_agg(n, ' ' ORDER BY n) FROM (
			SELECT right(te.name, 1) || '=' || count(*) AS n FROM tasks t JOIN tenants te ON te.id = t.tenant_id
			WHERE t.queue = $1 AND t.admitted_at IS NOT NULL GROUP BY te.name) AS x`, queue).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// c is held to its quota of 1; a and b share the rest.
	if got := admitted(tx); got != "a=2 b=1 c=1" && got != "a=1 b=2 c=1" {
		t.Errorf("admitted by tenant: %s; want c=1 and a and b 3 between them, 2 and 1", got)
	}
	var jobs int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1`, queue).Scan(&jobs); err != nil || jobs != 4 {
		t.Errorf("River jobs in the queue: %d, %v; want 4", jobs, err)
	}
	if res, _, err := d.admit(ctx, tx, cfg, queue); err != nil || res.Admitted != 0 {
		t.Errorf("a second pass: %+v, %v; want nothing admitted (the queue is full)", res, err)
	}
}
