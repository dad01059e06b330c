package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// rateFixture is a queue of 50 slots of one tenant, in a transaction
// rolled back at the test's end (its clock stands still: shift moves the
// world back instead).
type rateFixture struct {
	t      *testing.T
	ctx    context.Context
	tx     pgx.Tx
	queue  string
	tenant uuid.UUID
	d      *Dispatcher
}

func newRateFixture(t *testing.T) *rateFixture {
	t.Helper()
	f := &rateFixture{t: t, ctx: context.Background(), tx: pgtest.Tx(t), queue: "q-" + uuid.NewString()[:8], tenant: uuid.New()}
	f.exec(`INSERT INTO queues (name) VALUES ($1)`, f.queue)
	f.exec(`INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at) VALUES (gen_random_uuid(), $1, jsonb_build_object($2::text, 50), now(), now(), now() + interval '1 day')`,
		t.Name(), f.queue)
	f.exec(`INSERT INTO tenants (id, name, weight) VALUES ($1, $2, 1)`, f.tenant, f.queue)
	f.exec(`INSERT INTO namespaces (tenant_id, name) VALUES ($1, 'default')`, f.tenant)
	f.exec(`INSERT INTO jobs (id, tenant_id, namespace, name, description, labels, status, version, spec, shard, created_at, created_by, updated_at, updated_by)
		VALUES ($1, $1, 'default', 'j', '', '{}', 'active', 1, '{}', 0, now(), 'test', now(), 'test')`, f.tenant)
	f.exec(`INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at) VALUES ($1, $1, $1, 1, 0, now(), 'manual', 'pending', now())`, f.tenant)
	var err error
	if f.d, err = New(); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *rateFixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.tx.Exec(f.ctx, sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

func (f *rateFixture) text(sql string, args ...any) string {
	f.t.Helper()
	var s string
	if err := f.tx.QueryRow(f.ctx, sql, args...).Scan(&s); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// tasks writes n tasks named prefix01.. of key (none: ""), limit per
// per, waiting since age ago (the first oldest).
func (f *rateFixture) tasks(prefix string, n int, key string, limit int, per time.Duration, age string) {
	f.t.Helper()
	var k any
	if key != "" {
		k = key
	}
	f.exec(`INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at, ready_at,
			rate_key, rate_limit, rate_per_ms)
		SELECT gen_random_uuid(), $1, $1, $3 || lpad(i::text, 2, '0'), 'queued', 0, $2, 3, 0, now(), now(), now() - $7::interval + i * interval '1 ms', $4, $5, $6
		FROM generate_series(1, $8) AS i`, f.tenant, f.queue, prefix, k, limit, per.Milliseconds(), age, n)
}

// pass is one admission pass.
func (f *rateFixture) pass() Admission {
	f.t.Helper()
	res, _, err := f.d.admit(f.ctx, f.tx, AdmitConfig{Aging: DefaultAging, ReserveAfter: DefaultReserveAfter}, f.queue)
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

// admitted is the steps admitted, in order.
func (f *rateFixture) admitted() string {
	return f.text(`SELECT COALESCE(string_agg(step, ' ' ORDER BY step), '') FROM tasks WHERE queue = $1 AND admitted_at IS NOT NULL`, f.queue)
}

// places are the places of the tasks named prefix.. waiting in line, in
// seconds from now, by place.
func (f *rateFixture) places(prefix string) string {
	return f.text(`SELECT COALESCE(string_agg(step || '@' || round(extract(epoch FROM rate_at - now()))::text, ' ' ORDER BY rate_at), '')
		FROM tasks WHERE queue = $1 AND step LIKE $2 || '%' AND admitted_at IS NULL AND ready_at > now()`, f.queue, prefix)
}

// shift moves the world back by d: as if d passed.
func (f *rateFixture) shift(d string) {
	f.t.Helper()
	f.exec(`UPDATE tasks SET ready_at = ready_at - $2::interval, rate_at = rate_at - $2::interval WHERE queue = $1`, f.queue, d)
	f.exec(`UPDATE rate_buckets SET tat = tat - $2::interval, tail = tail - $2::interval WHERE tenant_id = $1`, f.tenant, d)
}

// Rate limits at admission (rateFixture). A quiet key lets its limit
// start at once and lines the rest up, one interval apart, after the next
// token; another key and a task without a rate limit are not held back;
// when the first place comes, one more starts; a task released later is
// lined up behind the line, though a token would be free for it; and a
// pass that lined up tasks says when the first place comes.
func TestRateLimitsAtAdmission(t *testing.T) {
	t.Parallel()
	f := newRateFixture(t)
	f.tasks("a", 10, "vendor-a", 3, time.Minute, "10 s") // 3 a minute: one every 20 s
	f.tasks("b", 2, "vendor-b", 1, time.Minute, "10 s")
	f.tasks("free", 1, "", 0, 0, "10 s")
	res := f.pass()
	if got := f.admitted(); got != "a01 a02 a03 b01 free01" {
		t.Errorf("the first pass admitted %s; want a's first 3 (its limit, at once), b's first and the task without a rate limit", got)
	}
	if got := f.places("a"); got != "a04@20 a05@40 a06@60 a07@80 a08@100 a09@120 a10@140" {
		t.Errorf("a's line: %s; want one a 20 s, after its next token in 20 s", got)
	}
	if got := f.places("b"); got != "b02@60" {
		t.Errorf("b's line: %s; want 60", got)
	}
	if res.LinedUp != 8 || res.NextPlace.IsZero() {
		t.Errorf("the pass: %+v; want 8 lined up, and its first place", res)
	}
	if res := f.pass(); res.Admitted != 0 || res.LinedUp != 0 {
		t.Errorf("a second pass at once: %+v; want nothing admitted or lined up", res)
	}

	// 20 s later (the world moved back): a's first place came.
	f.shift("20 s")
	if res := f.pass(); res.Admitted != 1 || f.admitted() != "a01 a02 a03 a04 b01 free01" {
		t.Errorf("20 s later: %+v, admitted %s; want a04, the first in a's line", res, f.admitted())
	}
	// A task of a released now waits behind the line, though the next
	// token (in 20 s) would be free for it by then.
	f.tasks("late", 1, "vendor-a", 3, time.Minute, "1 s")
	if res := f.pass(); res.Admitted != 0 || res.LinedUp != 1 {
		t.Errorf("a task released behind the line: %+v; want lined up", res)
	}
	if got := f.places("late"); got != "late01@140" {
		t.Errorf("its place: %s s from now; want 140, after a's last place (120)", got)
	}
	if got := f.text(`SELECT count(*)::text FROM rate_buckets WHERE tenant_id = $1`, f.tenant); got != "2" {
		t.Errorf("%s buckets; want 2", got)
	}
}

// What a line keeps: with a limit of 1 (no slack), a task admitted late
// delays the next one's token; that one, whose place came, takes the
// next token and keeps its place before those behind it. Tasks cancelled
// in line leave no line behind them: once the bucket is full again, a new
// task starts at once. Two steps naming one key with different limits
// share its bucket, each task lined up after the one before it by that
// one's interval.
func TestRateLimitLines(t *testing.T) {
	t.Parallel()
	f := newRateFixture(t)
	f.tasks("c", 4, "one-a-minute", 1, time.Minute, "10 s")
	f.pass()
	if got := f.places("c"); got != "c02@60 c03@120 c04@180" {
		t.Fatalf("c's line: %s", got)
	}
	f.shift("65 s") // c02's place came 5 s ago; it starts now
	if f.pass(); f.admitted() != "c01 c02" {
		t.Fatalf("admitted %s; want c02 too", f.admitted())
	}
	f.shift("56 s") // c03's place (120) came 1 s ago; its token comes 4 s later
	if res := f.pass(); res.Admitted != 0 || res.LinedUp != 1 {
		t.Errorf("c03, late: %+v; want placed again", res)
	}
	if got := f.places("c"); got != "c03@4 c04@59" {
		t.Errorf("c's line: %s; want c03 at its next token (4 s), before c04", got)
	}

	f.tasks("d", 4, "one-an-hour", 1, time.Hour, "10 s")
	f.pass()
	if got := f.places("d"); got != "d02@3600 d03@7200 d04@10800" {
		t.Fatalf("d's line: %s", got)
	}
	f.exec(`UPDATE tasks SET status = 'cancelled' WHERE queue = $1 AND step LIKE 'd%' AND admitted_at IS NULL`, f.queue)
	f.shift("3601 s")
	f.tasks("e", 1, "one-an-hour", 1, time.Hour, "1 s")
	if f.pass(); !strings.Contains(f.admitted(), "e01") {
		t.Errorf("a task after a cancelled line, the bucket full: admitted %s, e01's place %q; want e01 at once", f.admitted(), f.places("e"))
	}

	f.tasks("m-a", 12, "shared", 10, time.Minute, "10 s") // one every 6 s
	f.tasks("m-b", 1, "shared", 1, time.Hour, "5 s")
	f.pass()
	if got := f.places("m-"); got != "m-a11@6 m-a12@12 m-b01@18" {
		t.Errorf("the shared key's line: %s; want the 10-a-minute tasks 6 s apart, the 1-an-hour one 6 s after", got)
	}
}
