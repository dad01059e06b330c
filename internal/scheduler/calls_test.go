package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/scheduler"
)

// A step that runs another job starts one child run with the params it
// gives, ends with it and passes on its outputs; a failed child fails the
// step and its run, and a retry of the run retries the same child from
// where it failed; cancelling the parent cancels the child; a missing
// job, params the job refuses and the depth limit dead-letter the step,
// naming why.
func TestJobStepRunsAChildRun(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var mu sync.Mutex
	reports := map[string]string{} // report's payload by run
	var fail, hold sync.Map
	release := make(chan struct{})
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"work": func(ctx context.Context, c executor.Call) error {
			var p struct{ Month string }
			_ = json.Unmarshal(c.Payload, &p)
			if _, ok := fail.Load(p.Month); ok {
				return executor.Permanent(errors.New("no data for " + p.Month))
			}
			if _, ok := hold.Load(p.Month); ok {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return executor.SetOutput(ctx, map[string]any{"total": len(p.Month), "month": p.Month})
		},
		"report": func(ctx context.Context, c executor.Call) error {
			mu.Lock()
			defer mu.Unlock()
			reports[c.RunID.String()] = string(c.Payload)
			return nil
		},
		"prep": func(ctx context.Context, c executor.Call) error {
			return executor.SetOutput(ctx, map[string]any{"month": "2026-11"})
		},
	})
	startPolicyNode(t, pool, node.Config{})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	one := &dag.Retry{MaxAttempts: 1}
	createJob(t, pool, "invoice", dag.JobSpec{Schedule: never, Overlap: dag.OverlapSkip, Defaults: dag.StepDefaults{Retry: one},
		Params: map[string]dag.Param{"month": {Type: "string"}},
		Steps:  []dag.Step{{Name: "work", Run: dag.Executor{Handler: "work"}, Payload: dag.Payload(`{"month": "${{ params.month }}"}`)}}})
	parentSpec := func(month string) dag.JobSpec {
		return dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Defaults: dag.StepDefaults{Retry: one},
			Params: map[string]dag.Param{"month": {Type: "string", Default: dag.Payload(`"` + month + `"`)}},
			Steps: []dag.Step{
				{Name: "prep", Run: dag.Executor{Handler: "prep"}},
				{Name: "invoke", Needs: []string{"prep"}, Run: dag.Executor{Job: &dag.JobCall{Name: "invoice", Params: dag.Payload(`{"month": "${{ params.month }}"}`)}}},
				{Name: "report", Needs: []string{"invoke"}, Run: dag.Executor{Handler: "report"},
					Payload: dag.Payload(`{"child": "${{ steps.invoke.output.id }}", "total": "${{ steps.invoke.output.outputs.work.total }}", "outcome": "${{ steps.invoke.output.outcome }}"}`)},
			}}
	}
	createJob(t, pool, "billing", parentSpec("2026-11"))
	jobs, _, runs := services(t, pool)
	billing := job.Ref{Namespace: "default", Name: "billing"}
	statusOf := func(id uuid.UUID) string {
		r, err := runs.Get(ctx, job.Anonymous, id, run.ItemsPage{})
		if err != nil {
			t.Fatal(err)
		}
		return string(r.Status)
	}
	waitRun := func(id uuid.UUID, status string) {
		t.Helper()
		enginetest.WaitFor(t, 60*time.Second, "run "+id.String()+" "+status, func() bool { return statusOf(id) == status })
	}
	childOf := func(parent uuid.UUID) (uuid.UUID, int) {
		t.Helper()
		n := enginetest.Int(t, pool, "SELECT count(*) FROM runs AS c JOIN tasks AS t ON t.id = c.parent_task_id WHERE t.run_id = $1", parent)
		if n == 0 {
			return uuid.Nil, 0
		}
		return enginetest.UUID(t, pool, "SELECT c.id FROM runs AS c JOIN tasks AS t ON t.id = c.parent_task_id WHERE t.run_id = $1", parent), n
	}

	// Success: the child's outputs reach the step after.
	r1, err := runs.Trigger(ctx, job.Anonymous, billing, "", true)
	if err != nil {
		t.Fatal(err)
	}
	waitRun(r1.ID, "succeeded")
	child, n := childOf(r1.ID)
	if n != 1 {
		t.Fatalf("run %s started %d child runs", r1.ID, n)
	}
	c, err := runs.Get(ctx, job.Anonymous, child, run.ItemsPage{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Trigger != lifecycle.TriggerParent || c.ParentRun == nil || *c.ParentRun != r1.ID || c.ParentStep != "invoke" || strings.ReplaceAll(string(c.Params), " ", "") != `{"month":"2026-11"}` {
		t.Errorf("child run: trigger %s, parent %v step %q, params %s", c.Trigger, c.ParentRun, c.ParentStep, c.Params)
	}
	if depth := enginetest.Int(t, pool, "SELECT depth FROM runs WHERE id = $1", child); depth != 1 {
		t.Errorf("child depth %d", depth)
	}
	mu.Lock()
	var rep struct {
		Child, Outcome string
		Total          int
	}
	if err := json.Unmarshal([]byte(reports[r1.ID.String()]), &rep); err != nil || rep.Child != child.String() || rep.Total != 7 || rep.Outcome != "succeeded" {
		t.Errorf("report's payload %s (%v)", reports[r1.ID.String()], err)
	}
	mu.Unlock()
	p1, err := runs.Get(ctx, job.Anonymous, r1.ID, run.ItemsPage{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range p1.Tasks {
		if tk.Step == "invoke" && (tk.ChildRunID == nil || *tk.ChildRunID != child || len(tk.Attempts) != 1 || tk.Attempts[0].Worker != "orrery (child run)") {
			t.Errorf("invoke: child %v, attempts %+v", tk.ChildRunID, tk.Attempts)
		}
	}

	// Failure: the child fails, so does the step; a retry of the parent
	// retries the same child, which then succeeds.
	fail.Store("2026-10", true)
	r2, err := runs.TriggerWith(ctx, job.Anonymous, billing, run.TriggerOptions{IgnoreOverlap: true, ParamTexts: map[string]string{"month": "2026-10"}})
	if err != nil {
		t.Fatal(err)
	}
	waitRun(r2.ID, "failed")
	child2, _ := childOf(r2.ID)
	if s := statusOf(child2); s != "failed" {
		t.Errorf("child of a failed step is %s", s)
	}
	if e := enginetest.Int(t, pool, "SELECT count(*) FROM tasks WHERE run_id = $1 AND step = 'invoke' AND status = 'dead_lettered' AND last_error LIKE '%' || $2 || '%'", r2.ID, child2.String()); e != 1 {
		t.Errorf("the dead-lettered step does not name its child run")
	}
	fail.Delete("2026-10")
	if _, err := runs.RetryRun(ctx, job.Anonymous, r2.ID, true); err != nil {
		t.Fatal(err)
	}
	waitRun(r2.ID, "succeeded")
	if again, n := childOf(r2.ID); again != child2 || n != 1 {
		t.Errorf("the retry started child %s (%d in all); want %s again", again, n, child2)
	}
	if s := statusOf(child2); s != "succeeded" {
		t.Errorf("the retried child is %s", s)
	}

	// Cancel: the parent's cancel cancels the child, which is held running.
	hold.Store("2026-09", true)
	r3, err := runs.TriggerWith(ctx, job.Anonymous, billing, run.TriggerOptions{IgnoreOverlap: true, ParamTexts: map[string]string{"month": "2026-09"}})
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 60*time.Second, "the child run started", func() bool {
		c, n := childOf(r3.ID)
		return n == 1 && statusOf(c) == "running"
	})
	// A run of the child's job started meanwhile does not see the child
	// run as active (invoice's overlap is skip): the child is its caller's.
	own, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "invoice"}, run.TriggerOptions{ParamTexts: map[string]string{"month": "2026-08"}})
	if err != nil {
		t.Fatal(err)
	}
	if own.Status == lifecycle.RunSkipped {
		t.Errorf("a run of invoice was skipped for its overlap with a child run: %s", own.Reason)
	}
	if _, err := runs.CancelRun(ctx, job.Anonymous, r3.ID, "test"); err != nil {
		t.Fatal(err)
	}
	child3, _ := childOf(r3.ID)
	if s := statusOf(child3); s != "cancelled" {
		t.Errorf("the child of a cancelled run is %s", s)
	}
	close(release)

	// A missing job, and params the job refuses, dead-letter the step.
	for name, tc := range map[string]struct {
		call dag.JobCall
		want string
	}{
		"calls-nothing": {dag.JobCall{Name: "nope"}, "run.job: job default/nope does not exist"},
		"calls-badly":   {dag.JobCall{Name: "invoice", Params: dag.Payload(`{"month": 3}`)}, "run.job.params: params.month"},
		"calls-bare":    {dag.JobCall{Name: "invoice"}, "run.job.params: "},
	} {
		createJob(t, pool, name, dag.JobSpec{Schedule: never, Steps: []dag.Step{{Name: "invoke", Run: dag.Executor{Job: &tc.call}}}})
		r, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: name}, "", true)
		if err != nil {
			t.Fatal(err)
		}
		waitRun(r.ID, "failed")
		var why string
		if err := pool.QueryRow(ctx, "SELECT last_error FROM tasks WHERE run_id = $1", r.ID).Scan(&why); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(why, tc.want) {
			t.Errorf("%s: the step failed with %q; want %q...", name, why, tc.want)
		}
		if _, n := childOf(r.ID); n != 0 {
			t.Errorf("%s: a child run was written", name)
		}
	}

	// Cycles: refused at apply; one apply could not see (two jobs changed
	// at once, here by hand) stops at the depth limit.
	createJob(t, pool, "ping", dag.JobSpec{Schedule: never, Steps: []dag.Step{{Name: "call", Run: dag.Executor{Job: &dag.JobCall{Name: "pong"}}}}})
	_, err = jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "pong"}, Spec: dag.JobSpec{Schedule: never,
		Steps: []dag.Step{{Name: "call", Run: dag.Executor{Job: &dag.JobCall{Name: "ping"}}}}}}, "")
	if err == nil || !strings.Contains(err.Error(), "cycle of jobs running each other: default/pong runs default/ping runs default/pong") {
		t.Fatalf("a cycle of two jobs: %v", err)
	}
	_, err = jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "self"}, Spec: dag.JobSpec{Schedule: never,
		Steps: []dag.Step{{Name: "call", Run: dag.Executor{Job: &dag.JobCall{Name: "self"}}}}}}, "")
	if err == nil || !strings.Contains(err.Error(), "runs the job itself") {
		t.Fatalf("a job that runs itself: %v", err)
	}
	// (ping's call hidden while pong is written, as a change committed at
	// the same time would be, then back)
	if _, err := pool.Exec(ctx, "DELETE FROM job_calls WHERE callee_name = 'pong'"); err != nil {
		t.Fatal(err)
	}
	createJob(t, pool, "pong", dag.JobSpec{Schedule: never, Steps: []dag.Step{{Name: "call", Run: dag.Executor{Job: &dag.JobCall{Name: "ping"}}}}})
	if _, err := pool.Exec(ctx, "INSERT INTO job_calls (job_id, tenant_id, callee_namespace, callee_name) SELECT id, tenant_id, 'default', 'pong' FROM jobs WHERE name = 'ping'"); err != nil {
		t.Fatal(err)
	}
	top, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "ping"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	waitRun(top.ID, "failed")
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs AS r JOIN jobs AS j ON j.id = r.job_id WHERE j.name IN ('ping', 'pong')"); n != run.MaxCallDepth+1 {
		t.Errorf("a cycle wrote %d runs; want %d (the depth limit)", n, run.MaxCallDepth+1)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs AS r JOIN jobs AS j ON j.id = r.job_id WHERE j.name IN ('ping', 'pong') AND r.status <> 'failed'"); n != 0 {
		t.Errorf("%d runs of the cycle did not fail", n)
	}

	// A tree of calls started in one transaction: tree's two first steps
	// run branch and leaf, and branch's first step runs leaf too: each
	// child takes its own instant (no two runs of leaf at one).
	createJob(t, pool, "leaf", dag.JobSpec{Schedule: never, Run: &dag.Executor{Handler: "prep"}})
	createJob(t, pool, "branch", dag.JobSpec{Schedule: never, Steps: []dag.Step{{Name: "to-leaf", Run: dag.Executor{Job: &dag.JobCall{Name: "leaf"}}}}})
	createJob(t, pool, "tree", dag.JobSpec{Schedule: never, Steps: []dag.Step{
		{Name: "a", Run: dag.Executor{Job: &dag.JobCall{Name: "branch"}}},
		{Name: "b", Run: dag.Executor{Job: &dag.JobCall{Name: "leaf"}}}}})
	tree, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "tree"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	waitRun(tree.ID, "succeeded")
	if n := enginetest.Int(t, pool, "SELECT count(DISTINCT r.scheduled_for) FROM runs AS r JOIN jobs AS j ON j.id = r.job_id WHERE j.name = 'leaf'"); n != 2 {
		t.Errorf("leaf has %d distinct instants, want its 2 runs'", n)
	}

	// A loop through a step and an after-trigger (hop runs a step of job
	// back, and starts after back's runs): the call depth carried across
	// both bounds it.
	createJob(t, pool, "back", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Run: &dag.Executor{Handler: "prep"}})
	createJob(t, pool, "hop", dag.JobSpec{Schedule: schedule.Spec{After: &schedule.After{Job: "back"}}, Overlap: dag.OverlapAllow,
		Misfire: dag.MisfireBackfill, MaxBackfill: 1000, Steps: []dag.Step{{Name: "call", Run: dag.Executor{Job: &dag.JobCall{Name: "back"}}}}})
	if _, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "back"}, "", true); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 60*time.Second, "the loop stopped at the depth limit", func() bool {
		return enginetest.Int(t, pool, `SELECT count(*) FROM tasks AS k JOIN runs AS r ON r.id = k.run_id JOIN jobs AS j ON j.id = r.job_id
			WHERE j.name = 'hop' AND k.status = 'dead_lettered' AND k.last_error LIKE 'run.job: its run is 10 runs below the first%'`) == 1
	})
	time.Sleep(time.Second) // nothing more starts
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs AS r JOIN jobs AS j ON j.id = r.job_id WHERE j.name IN ('back', 'hop')"); n != 2*(run.MaxCallDepth+1) {
		t.Errorf("the loop wrote %d runs of back and hop; want %d", n, 2*(run.MaxCallDepth+1))
	}

	// Permission: a step runs only a job its author may run.
	deny := job.Actor{Tenant: job.DefaultTenant, Name: "reader", MayRun: func(ns, name string) bool { return name != "invoice" }}
	_, err = jobs.Create(ctx, deny, dag.Resource{Metadata: dag.Metadata{Name: "sneaky"}, Spec: dag.JobSpec{Schedule: never,
		Steps: []dag.Step{{Name: "call", Run: dag.Executor{Job: &dag.JobCall{Name: "invoice"}}}}}}, "")
	if err == nil || !strings.Contains(err.Error(), "spec.steps[0].run.job.name: default/invoice is outside what you were granted") {
		t.Fatalf("a call its author may not make: %v", err)
	}
	// Nor may such an actor change a job whose step runs invoice (its
	// params are the call's).
	spec := parentSpec("2026-11")
	spec.Steps[1].Run.Job.Params = dag.Payload(`{"month": "1999-01"}`)
	if _, err := jobs.Update(ctx, deny, billing, dag.Resource{Metadata: dag.Metadata{Name: "billing"}, Spec: spec}, 1); err == nil || !strings.Contains(err.Error(), "outside what you were granted") {
		t.Fatalf("an actor that may not run invoice changed the params of a call to it: %v", err)
	}

	// The right is asked again when a step starts, of the key that last
	// wrote the calling job: carol, editor of job leaf only, writes a job
	// that runs leaf; it runs, and once her grant is revoked its step is
	// dead-lettered, naming why.
	keys := access.New(pool)
	admin := access.Principal{Tenant: job.DefaultTenant, Name: "test", Role: access.Admin}
	_, carolKey, err := keys.Create(ctx, access.NewKey{Tenant: "default", Principal: "carol", Role: access.None, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	grant := access.Grant{Principal: "carol", Namespace: "default", Job: "leaf", Role: access.Editor}
	if _, err := keys.GrantRole(ctx, admin, grant); err != nil {
		t.Fatal(err)
	}
	carol := access.Principal{Tenant: job.DefaultTenant, Name: "carol", Role: access.None, KeyID: carolKey.ID,
		Grants: []access.Grant{grant}}.Actor()
	carol.Scope = nil // (her scope narrows lists; the job is written as the API would let her, with a grant on its namespace)
	if _, err := jobs.Create(ctx, carol, dag.Resource{Metadata: dag.Metadata{Name: "carols"}, Spec: dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "call", Run: dag.Executor{Job: &dag.JobCall{Name: "leaf"}}}}}}, ""); err != nil {
		t.Fatal(err)
	}
	carols := job.Ref{Namespace: "default", Name: "carols"}
	ok1, err := runs.Trigger(ctx, job.Anonymous, carols, "", true)
	if err != nil {
		t.Fatal(err)
	}
	waitRun(ok1.ID, "succeeded")
	if err := keys.RevokeGrant(ctx, admin, grant); err != nil {
		t.Fatal(err)
	}
	denied, err := runs.Trigger(ctx, job.Anonymous, carols, "", true)
	if err != nil {
		t.Fatal(err)
	}
	waitRun(denied.ID, "failed")
	if why := enginetest.Int(t, pool, "SELECT count(*) FROM tasks WHERE run_id = $1 AND last_error LIKE 'run.job: the key that last wrote default/carols may no longer run default/leaf%'", denied.ID); why != 1 {
		t.Errorf("the step of a job whose author lost the right: %v", taskErrors(t, pool, denied.ID))
	}
}

// taskErrors lists a run's tasks' errors, for a failure's message.
func taskErrors(t *testing.T, pool *pgxpool.Pool, runID uuid.UUID) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT step || ': ' || status || ' ' || last_error FROM tasks WHERE run_id = $1", runID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// An event of a child run's end that its step cannot take (an error that
// stays, armed here at failpoint scheduler/downstream-event) is set aside
// with its error and retried later, holding up no other event of its
// shard: another caller's step ends meanwhile, and the set-aside one ends
// once the error is gone.
func TestAnEventThatFailsIsSetAside(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	hold := make(chan struct{})
	var held sync.Map
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"work": func(ctx context.Context, c executor.Call) error {
			if _, ok := held.Load("on"); ok {
				select {
				case <-hold:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		},
	})
	fp := failpoint.New()
	startPolicyNode(t, pool, node.Config{Failpoints: fp})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	createJob(t, pool, "kid", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Run: &dag.Executor{Handler: "work"}})
	createJob(t, pool, "mom", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Run: &dag.Executor{Job: &dag.JobCall{Name: "kid"}}})
	_, _, runs := services(t, pool)
	mom := job.Ref{Namespace: "default", Name: "mom"}
	held.Store("on", true)
	bad, err := runs.Trigger(ctx, job.Anonymous, mom, "", true)
	if err != nil {
		t.Fatal(err)
	}
	var child uuid.UUID
	enginetest.WaitFor(t, 30*time.Second, "the child run started", func() bool {
		return pool.QueryRow(ctx, "SELECT c.id FROM runs AS c JOIN tasks AS t ON t.id = c.parent_task_id WHERE t.run_id = $1", bad.ID).Scan(&child) == nil
	})
	name := scheduler.FailpointDownstreamEvent + ":" + child.String()
	fp.ErrOn(name, errors.New("poisoned for the test"))
	good, err := runs.Trigger(ctx, job.Anonymous, mom, "", true)
	if err != nil {
		t.Fatal(err)
	}
	held.Delete("on")
	close(hold)
	status := func(id uuid.UUID) string {
		var s string
		_ = pool.QueryRow(ctx, "SELECT status FROM runs WHERE id = $1", id).Scan(&s)
		return s
	}
	enginetest.WaitFor(t, 30*time.Second, "the other caller's run succeeds beside the failing event", func() bool { return status(good.ID) == "succeeded" })
	enginetest.WaitFor(t, 30*time.Second, "the failing event set aside", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM upstream_finishes WHERE run_id = $1 AND tries >= 1 AND last_error LIKE '%poisoned for the test%' AND retry_at IS NOT NULL", child) == 1
	})
	if s := status(bad.ID); s != "pending" && s != "running" {
		t.Errorf("the caller whose event fails is %s, want it still open", s)
	}
	fp.Disarm(name)
	enginetest.WaitFor(t, 60*time.Second, "the set-aside event taken once the error is gone", func() bool { return status(bad.ID) == "succeeded" })
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM upstream_finishes"); n != 0 {
		t.Errorf("%d events left", n)
	}
}
