package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/enginetest"
	"github.com/orrery-dev/orrery/engine/job"
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
