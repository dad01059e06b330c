package run_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

// These tests write in one transaction each, rolled back at their end
// (pgtest.Tx): the Applier writes in its caller's transaction, so a
// report's whole cascade is seen before anything commits.

// inTx is a job's run written in a rolled-back transaction, with a worker
// to start its attempts on.
type inTx struct {
	t      *testing.T
	ctx    context.Context
	tx     pgx.Tx
	apply  *run.Applier
	worker run.Worker
}

func newInTx(t *testing.T) *inTx {
	t.Helper()
	return newInTxOn(t, pgtest.Tx(t), t.Name())
}

// newInTxOn is newInTx in tx (the caller ends it), its worker named name.
func newInTxOn(t *testing.T, tx pgx.Tx, name string) *inTx {
	t.Helper()
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	x := &inTx{t: t, ctx: context.Background(), tx: tx, apply: &run.Applier{Dispatcher: d},
		worker: run.Worker{Name: name, ID: uuid.Must(uuid.NewV7())}}
	x.exec(`INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at) VALUES ($1, $2, '{"default": 10}', now(), now(), now() + interval '1 hour')`,
		x.worker.ID, x.worker.Name)
	return x
}

func (x *inTx) exec(sql string, args ...any) {
	x.t.Helper()
	if _, err := x.tx.Exec(x.ctx, sql, args...); err != nil {
		x.t.Fatalf("%s: %v", sql, err)
	}
}

func (x *inTx) text(sql string, args ...any) string {
	x.t.Helper()
	var s string
	if err := x.tx.QueryRow(x.ctx, sql, args...).Scan(&s); err != nil {
		x.t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// run writes a job of steps (named after the test) and one run of it,
// and returns the run.
func (x *inTx) run(steps ...dag.Step) uuid.UUID {
	x.t.Helper()
	return x.insert(x.job(dag.JobSpec{Steps: steps}), 1)[0]
}

// job writes a job of spec (its schedule yearly) and returns it.
func (x *inTx) job(spec dag.JobSpec) run.JobRef {
	x.t.Helper()
	spec.Schedule = schedule.Spec{Cron: schedule.Crons("@yearly")}
	res := dag.Resource{Metadata: dag.Metadata{Name: fmt.Sprintf("finish-%d", time.Now().UnixNano())}, Spec: spec}
	res.Normalize()
	if es := dag.Validate(&res); len(es) > 0 {
		x.t.Fatal(es)
	}
	text, err := json.Marshal(res.Spec)
	if err != nil {
		x.t.Fatal(err)
	}
	id := uuid.Must(uuid.NewV7())
	x.exec(`INSERT INTO jobs (id, tenant_id, namespace, name, description, labels, status, version, spec, shard, created_at, created_by, updated_at, updated_by)
		VALUES ($1, $2, 'default', $3, '', '{}', 'active', 1, $4, 0, now(), 'test', now(), 'test')`, id, job.DefaultTenant, res.Metadata.Name, text)
	x.exec(`INSERT INTO job_versions (job_id, version, tenant_id, description, labels, spec, created_at, created_by)
		VALUES ($1, 1, $2, '', '{}', $3, now(), 'test')`, id, job.DefaultTenant, text)
	return run.JobRef{ID: id, Tenant: job.DefaultTenant, Version: 1, Spec: &res.Spec}
}

// insert writes n pending runs of j by one Insert, and returns them.
func (x *inTx) insert(j run.JobRef, n int) []uuid.UUID {
	x.t.Helper()
	news := make([]run.New, n)
	at := time.Now()
	for i := range news {
		news[i] = run.New{Job: j, At: at.Add(time.Duration(i) * time.Microsecond), Trigger: "manual", Status: "pending"}
	}
	ids, err := x.apply.Insert(x.ctx, x.tx, news, nil, nil)
	if err != nil || len(ids) != n || slices.Contains(ids, uuid.Nil) {
		x.t.Fatalf("insert %d runs: %v %v", n, ids, err)
	}
	return ids
}

// start starts the next attempt of the run's step.
func (x *inTx) start(runID uuid.UUID, step string) *run.Attempt {
	x.t.Helper()
	var task uuid.UUID
	var attempt int
	if err := x.tx.QueryRow(x.ctx, "SELECT id, attempt FROM tasks WHERE run_id = $1 AND step = $2", runID, step).Scan(&task, &attempt); err != nil {
		x.t.Fatal(err)
	}
	got, err := run.StartAttempts(x.ctx, x.tx, []run.Start{{TaskID: task, Attempt: attempt + 1}}, x.worker)
	if err != nil || len(got) != 1 || got[0] == nil {
		x.t.Fatalf("start %s: %v %v", step, got, err)
	}
	return got[0]
}

// report is a report of a's end, ok or failed for good.
func report(a *run.Attempt, ok bool) run.Report {
	res := executor.Result{OK: ok}
	if !ok {
		res = executor.Result{ExitReason: executor.ReasonError, FailureClass: executor.ClassUser, Error: "no"}
	}
	return run.Report{TaskID: a.Call.TaskID, RunID: a.Call.RunID, FencingToken: a.Call.FencingToken, Result: res, Shape: &a.Shape}
}

func (x *inTx) finish(reports ...run.Report) []bool {
	x.t.Helper()
	accepted, err := x.apply.Finish(x.ctx, x.tx, reports)
	if err != nil {
		x.t.Fatal(err)
	}
	return accepted
}

func (x *inTx) status(runID uuid.UUID) string {
	x.t.Helper()
	return x.text(`SELECT r.status || ' ' || string_agg(t.step || '=' || t.status, ',' ORDER BY t.step)
		FROM runs r JOIN tasks t ON t.run_id = r.id WHERE r.id = $1 GROUP BY r.status`, runID)
}

var once = &dag.Retry{MaxAttempts: 1}

func step(name string, needs ...string) dag.Step {
	return dag.Step{Name: name, Needs: needs, Run: dag.Executor{Handler: "h"}, Retry: once}
}

// One Finish takes a batch of every kind: a one-task run's success, a
// one-task run's failure for good (reported twice: taken once), a step of
// a pipeline whose child it releases, and a stale report; each ends as the
// lifecycle says, in one transaction.
func TestFinishABatchOfEveryKind(t *testing.T) {
	t.Parallel()
	x := newInTx(t)
	good, bad, pipe := x.run(step("only")), x.run(step("only")), x.run(step("a"), step("b", "a"))
	g, b, a := x.start(good, "only"), x.start(bad, "only"), x.start(pipe, "a")
	stale := report(a, true)
	stale.FencingToken--
	accepted := x.finish(report(a, true), report(g, true), stale, report(b, false), report(b, false))
	if fmt.Sprint(accepted) != "[true true false true false]" {
		t.Errorf("accepted %v, want [true true false true false] (the same attempt twice: taken once)", accepted)
	}
	for id, want := range map[uuid.UUID]string{
		good: "succeeded only=succeeded",
		bad:  "failed only=dead_lettered", // a run whose step failed for good is failed
		pipe: "pending a=succeeded,b=queued",
	} {
		if got := x.status(id); got != want {
			t.Errorf("run %s: %s, want %s", id, got, want)
		}
	}
	// The released child, then its end ends the run.
	x.finish(report(x.start(pipe, "b"), true))
	if got := x.status(pipe); got != "succeeded a=succeeded,b=succeeded" {
		t.Errorf("the pipeline: %s", got)
	}
}

// A failure for good fails what needs the step upstream and fails the
// run; a report of the reaper's (no shape, no run: read from the
// database) ends an attempt whose worker's lease lapsed.
func TestFinishAFailureAndALapsedLease(t *testing.T) {
	t.Parallel()
	x := newInTx(t)
	pipe, lapsed := x.run(step("a"), step("b", "a"), step("c", "b")), x.run(step("x"), step("y"))
	x.finish(report(x.start(pipe, "a"), false))
	if got := x.status(pipe); got != "failed a=dead_lettered,b=upstream_failed,c=upstream_failed" {
		t.Errorf("the pipeline: %s", got)
	}
	att := x.start(lapsed, "x")
	x.exec("UPDATE workers SET lease_expires_at = now() - interval '1 second' WHERE id = $1", x.worker.ID)
	accepted := x.finish(run.Report{TaskID: att.Call.TaskID, FencingToken: att.Call.FencingToken, Expired: true, Result: run.LeaseExpired("gone")})
	if !accepted[0] {
		t.Fatal("the reaper's report was not taken")
	}
	if got := x.text("SELECT outcome || ' ' || exit_reason FROM attempts WHERE task_id = $1", att.Call.TaskID); got != "failed lease_expired" {
		t.Errorf("the lapsed attempt: %s", got)
	}
	if got := x.status(lapsed); got != "pending x=dead_lettered,y=queued" {
		t.Errorf("the run of the lapsed lease: %s", got)
	}
}
