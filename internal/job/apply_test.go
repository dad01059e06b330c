package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

func summary(cs []job.Change) string {
	var parts []string
	for _, c := range cs {
		p := c.Action + " " + c.Namespace + "/" + c.Name
		if len(c.Fields) > 0 {
			p += " (" + strings.Join(c.Fields, ",") + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

func item(name, cron string) job.Item {
	r := resource(name, cron)
	return job.Item{Resource: r, Source: &job.Source{Path: "jobs/" + name + ".yaml", Commit: "abc123"}}
}

func TestApplyPlansIsIdempotentAndPrunes(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	// A job made through the API in the same namespace is never pruned.
	if _, err := svc.Create(ctx, job.Anonymous, resource("by-hand", "@daily"), ""); err != nil {
		t.Fatal(err)
	}
	items := []job.Item{item("a", "@daily"), item("b", "@hourly")}
	plan, err := svc.Plan(ctx, job.Anonymous, items, job.PlanOptions{Prune: true})
	if err != nil || summary(plan) != "create analytics/a; create analytics/b" {
		t.Fatalf("plan %q %v", summary(plan), err)
	}
	if n := counts(t, pool); n != "jobs=1 versions=1 audit=1 keys=0" {
		t.Fatalf("plan wrote: %s", n)
	}
	if _, err := svc.ApplyAll(ctx, job.Anonymous, items, job.PlanOptions{Prune: true}); err != nil {
		t.Fatal(err)
	}
	again, _ := svc.ApplyAll(ctx, job.Anonymous, items, job.PlanOptions{Prune: true})
	if summary(again) != "unchanged analytics/a; unchanged analytics/b" {
		t.Fatalf("second apply: %s", summary(again))
	}
	a, _ := svc.Get(ctx, job.Anonymous, job.Ref{Namespace: "analytics", Name: "a"})
	if a.Source == nil || a.Source.Path != "jobs/a.yaml" || a.Source.Commit != "abc123" || a.Version != 1 {
		t.Fatalf("source %+v version %d", a.Source, a.Version)
	}

	// Change a's schedule and one step's payload, drop b: update and delete.
	changed := item("a", "@weekly")
	changed.Resource.Spec.Payload = dag.Payload(`{"x": 1}`)
	plan, _ = svc.Plan(ctx, job.Anonymous, []job.Item{changed}, job.PlanOptions{Prune: true})
	if got := summary(plan); got != "update analytics/a (spec.schedule,spec.steps[main]); delete analytics/b" {
		t.Fatalf("plan %q", got)
	}
	if _, err := svc.ApplyAll(ctx, job.Anonymous, []job.Item{changed}, job.PlanOptions{Prune: true}); err != nil {
		t.Fatal(err)
	}
	a, _ = svc.Get(ctx, job.Anonymous, job.Ref{Namespace: "analytics", Name: "a"})
	if a.Version != 2 {
		t.Fatalf("a at version %d", a.Version)
	}
	if _, err := svc.Get(ctx, job.Anonymous, job.Ref{Namespace: "analytics", Name: "b"}); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("b was not pruned: %v", err)
	}
	if _, err := svc.Get(ctx, job.Anonymous, job.Ref{Namespace: "analytics", Name: "by-hand"}); err != nil {
		t.Fatalf("a job made through the API was pruned: %v", err)
	}
	if n := enginetest.Int(t, pool, `SELECT count(*)::int FROM jobs AS j JOIN job_schedules AS s ON s.job_id = j.id
		WHERE s.shard = j.shard AND s.next_fire_at IS NOT DISTINCT FROM CASE WHEN j.status = 'active' THEN j.next_fire_at END`); n != 3 {
		t.Fatalf("%d of 3 jobs (one pruned) with their schedule rows following them", n)
	}
}

func TestApplyIsAllOrNothing(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	bad := item("bad", "61 * * * *")
	_, err := svc.ApplyAll(ctx, job.Anonymous, []job.Item{item("good", "@daily"), bad}, job.PlanOptions{})
	var es dag.Errors
	if !errors.As(err, &es) || es[0].Field != "jobs[1].spec.schedule.cron" {
		t.Fatalf("got %v", err)
	}
	dup := []job.Item{item("x", "@daily"), item("x", "@hourly")}
	if _, err := svc.ApplyAll(ctx, job.Anonymous, dup, job.PlanOptions{}); err == nil || !strings.Contains(err.Error(), "jobs[1].metadata.name") {
		t.Fatalf("duplicate: %v", err)
	}
	if n := counts(t, pool); n != "jobs=0 versions=0 audit=0 keys=0" {
		t.Fatalf("a rejected apply wrote: %s", n)
	}
	var many []job.Item
	for i := range 50 {
		many = append(many, item(fmt.Sprintf("j%02d", i), "@daily"))
	}
	cs, err := svc.ApplyAll(ctx, job.Anonymous, many, job.PlanOptions{})
	if err != nil || len(cs) != 50 {
		t.Fatalf("%d changes, %v", len(cs), err)
	}
}

// readCommittedService is a job service on a test database whose
// transactions run at READ COMMITTED, PostgreSQL's default and the
// isolation deployments run (the test databases default to SERIALIZABLE,
// where the races below end as serialization failures and retries), and
// its pool.
func readCommittedService(t *testing.T) (*job.Service, *pgxpool.Pool) {
	t.Helper()
	cfg := pgtest.Pool(t).Config()
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	rc, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	svc, err := job.New(context.Background(), rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	return svc, rc
}

// deleteHeld deletes job id in a transaction of its own, as another
// client's delete would, and holds it open until the caller calls the
// returned func, which commits it.
func deleteHeld(t *testing.T, pool *pgxpool.Pool, id any) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"UPDATE jobs SET status = 'deleted', deleted_at = now(), next_fire_at = NULL WHERE id = $1",
		"UPDATE job_schedules SET next_fire_at = NULL WHERE job_id = $1",
	} {
		if _, err := tx.Exec(ctx, q, id); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// applyResult is what an ApplyAll in a goroutine answered.
type applyResult struct {
	changes []job.Change
	err     error
}

// waitForLockWait waits until some session of pool's database waits on a
// lock.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	enginetest.WaitFor(t, 10*time.Second, "the apply waits on the held delete", func() bool {
		return enginetest.Int(t, pool, `SELECT count(*)::int FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
}

// An apply that finds a job by its name while another transaction deletes
// it does not update the deleted job (and report it applied while no live
// job has the name): once its lock shows the job deleted, it looks the
// name up again, and creates the job.
func TestApplyByNameWhileTheJobIsDeleted(t *testing.T) {
	t.Parallel()
	svc, rc := readCommittedService(t)
	ctx := context.Background()
	if _, err := svc.ApplyAll(ctx, job.Anonymous, []job.Item{item("a", "@daily")}, job.PlanOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := svc.Get(ctx, job.Anonymous, job.Ref{Namespace: "analytics", Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	commit := deleteHeld(t, rc, a.ID)
	done := make(chan applyResult, 1)
	go func() {
		cs, err := svc.ApplyAll(ctx, job.Anonymous, []job.Item{item("a", "@hourly")}, job.PlanOptions{})
		done <- applyResult{cs, err}
	}()
	waitForLockWait(t, rc)
	commit()
	r := <-done
	if r.err != nil || summary(r.changes) != "create analytics/a" {
		t.Fatalf("apply: %q %v; want a create (the job of that name was deleted meanwhile)", summary(r.changes), r.err)
	}
	live, err := svc.Get(ctx, job.Anonymous, job.Ref{Namespace: "analytics", Name: "a"})
	if err != nil || live.ID == a.ID || live.Spec.Schedule.Cron[0] != "@hourly" {
		t.Fatalf("the live job a: %+v %v; want a new one, @hourly", live, err)
	}
}

// Pruning a job another transaction deletes meanwhile does not delete it
// a second time (a second delete in the audit, with a "before" that was
// not): the prune locks the job, sees it deleted, and leaves it.
func TestPruneWhileTheJobIsDeleted(t *testing.T) {
	t.Parallel()
	svc, rc := readCommittedService(t)
	ctx := context.Background()
	if _, err := svc.ApplyAll(ctx, job.Anonymous, []job.Item{item("a", "@daily"), item("b", "@daily")}, job.PlanOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := svc.Get(ctx, job.Anonymous, job.Ref{Namespace: "analytics", Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	commit := deleteHeld(t, rc, b.ID)
	done := make(chan applyResult, 1)
	go func() {
		cs, err := svc.ApplyAll(ctx, job.Anonymous, []job.Item{item("a", "@daily")}, job.PlanOptions{Prune: true})
		done <- applyResult{cs, err}
	}()
	waitForLockWait(t, rc)
	commit()
	if r := <-done; r.err != nil || summary(r.changes) != "unchanged analytics/a; unchanged analytics/b" {
		t.Fatalf("apply: %q %v; want nothing done (b was deleted by another meanwhile)", summary(r.changes), r.err)
	}
	if n := enginetest.Int(t, rc, "SELECT count(*)::int FROM audit_log WHERE action = 'delete' AND target_id = $1", b.ID); n != 0 {
		t.Fatalf("%d delete audit rows for a job the prune did not delete", n)
	}
}
