package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// Rate limits at admission, in a transaction rolled back at the test's
// end (its clock stands still: the test moves the world back instead).
// A quiet key lets its limit start at once and lines the rest up, one
// interval apart, after the next token; another key and a task without
// a rate limit are not held back; when the first place comes, one more
// starts; a task released later is lined up behind the line, though a
// token would be free for it; and a pass that lined up tasks says when
// the first place comes.
func TestRateLimitsAtAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := pgtest.Tx(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	text := func(sql string, args ...any) string {
		t.Helper()
		var s string
		if err := tx.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return s
	}
	queue := "q-" + uuid.NewString()[:8]
	exec(`INSERT INTO queues (name) VALUES ($1)`, queue)
	exec(`INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at) VALUES (gen_random_uuid(), $1, jsonb_build_object($2::text, 50), now(), now(), now() + interval '1 hour')`,
		t.Name(), queue)
	tenant := uuid.New()
	exec(`INSERT INTO tenants (id, name, weight) VALUES ($1, $2, 1)`, tenant, queue)
	exec(`INSERT INTO namespaces (tenant_id, name) VALUES ($1, 'default')`, tenant)
	exec(`INSERT INTO jobs (id, tenant_id, namespace, name, description, labels, status, version, spec, shard, created_at, created_by, updated_at, updated_by)
		VALUES ($1, $1, 'default', 'j', '', '{}', 'active', 1, '{}', 0, now(), 'test', now(), 'test')`, tenant)
	exec(`INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at) VALUES ($1, $1, $1, 1, 0, now(), 'manual', 'pending', now())`, tenant)
	tasks := func(prefix string, n int, key string, limit int, per time.Duration, age string) {
		t.Helper()
		var k any
		if key != "" {
			k = key
		}
		exec(`INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at, ready_at,
				rate_key, rate_limit, rate_per_ms)
			SELECT gen_random_uuid(), $1, $1, $3 || lpad(i::text, 2, '0'), 'queued', 0, $2, 3, 0, now(), now(), now() - $7::interval + i * interval '1 ms', $4, $5, $6
			FROM generate_series(1, $8) AS i`, tenant, queue, prefix, k, limit, per.Milliseconds(), age, n)
	}
	tasks("a", 10, "vendor-a", 3, time.Minute, "10 s") // 3 a minute: one every 20 s
	tasks("b", 2, "vendor-b", 1, time.Minute, "10 s")
	tasks("free", 1, "", 0, 0, "10 s")
	d, err := New()
	if err != nil {
		t.Fatal(err)
	}
	cfg := AdmitConfig{Aging: DefaultAging, ReserveAfter: DefaultReserveAfter}
	admitted := func() string {
		return text(`SELECT COALESCE(string_agg(step, ' ' ORDER BY step), '') FROM tasks WHERE queue = $1 AND admitted_at IS NOT NULL`, queue)
	}
	// places are the lined-up tasks' places, in seconds from now.
	places := func(prefix string) string {
		return text(`SELECT COALESCE(string_agg(round(extract(epoch FROM rate_at - now()))::text, ' ' ORDER BY rate_at), '')
			FROM tasks WHERE queue = $1 AND step LIKE $2 || '%' AND admitted_at IS NULL AND ready_at > now()`, queue, prefix)
	}
	pass := func() Admission {
		t.Helper()
		res, _, err := d.admit(ctx, tx, cfg, queue)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := pass()
	if got := admitted(); got != "a01 a02 a03 b01 free01" {
		t.Errorf("the first pass admitted %s; want a's first 3 (its limit, at once), b's first and the task without a rate limit", got)
	}
	if got := places("a"); got != "20 40 60 80 100 120 140" {
		t.Errorf("a's line: %s; want one a 20 s, after its next token in 20 s", got)
	}
	if got := places("b"); got != "60" {
		t.Errorf("b's line: %s; want 60", got)
	}
	if res.LinedUp != 8 || res.NextPlace.IsZero() {
		t.Errorf("the pass: %+v; want 8 lined up, and its first place", res)
	}
	if res := pass(); res.Admitted != 0 || res.LinedUp != 0 {
		t.Errorf("a second pass at once: %+v; want nothing admitted or lined up", res)
	}

	// 20 s later (the world moved back): a's first place came.
	exec(`UPDATE tasks SET ready_at = ready_at - interval '20 s', rate_at = rate_at - interval '20 s' WHERE queue = $1`, queue)
	exec(`UPDATE rate_buckets SET tat = tat - interval '20 s', tail = tail - interval '20 s' WHERE tenant_id = $1`, tenant)
	if res := pass(); res.Admitted != 1 || admitted() != "a01 a02 a03 a04 b01 free01" {
		t.Errorf("20 s later: %+v, admitted %s; want a04, the first in a's line", res, admitted())
	}
	// A task of a released now waits behind the line, though the next
	// token (in 20 s) would be free for it by then.
	tasks("late", 1, "vendor-a", 3, time.Minute, "1 s")
	if res := pass(); res.Admitted != 0 || res.LinedUp != 1 {
		t.Errorf("a task released behind the line: %+v; want lined up", res)
	}
	if got := places("late"); got != "140" {
		t.Errorf("its place: %s s from now; want 140, after a's last place (120)", got)
	}
	if got := text(`SELECT count(*)::text FROM rate_buckets WHERE tenant_id = $1`, tenant); got != "2" {
		t.Errorf("%s buckets; want 2", got)
	}
}
