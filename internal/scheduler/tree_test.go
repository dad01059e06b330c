package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// calling is a job of steps that each run job (width of them), after a
// first step when first is set.
func calling(job string, width int, first bool) dag.JobSpec {
	var steps []dag.Step
	if first {
		steps = append(steps, dag.Step{Name: "begin", Run: dag.Executor{Handler: "noop"}})
	}
	for i := range width {
		s := dag.Step{Name: fmt.Sprintf("c%03d", i), Run: dag.Executor{Job: &dag.JobCall{Name: job}}}
		if first {
			s.Needs = []string{"begin"}
		}
		steps = append(steps, s)
	}
	return dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}, Overlap: dag.OverlapAllow,
		Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}}, Steps: steps}
}

// A tree of 100 x 100 job steps (10,101 runs before trees were bounded)
// stops at its tenant's bound, the default 1,000 runs besides its root:
// the job steps past it are dead-lettered, naming the bound. Another
// tenant's run runs meanwhile.
func TestATreeOfRunsIsBounded(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{"noop": func(context.Context, executor.Call) error { return nil }})
	startPolicyNode(t, pool, node.Config{})
	one := dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}}
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}
	createJob(t, pool, "leaf", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Defaults: one, Steps: []dag.Step{{Name: "work", Run: dag.Executor{Handler: "noop"}}}})
	createJob(t, pool, "mid", calling("leaf", 100, true))
	createJob(t, pool, "top", calling("mid", 100, false))
	jobs, _, runs := services(t, pool)
	other := job.Actor{Tenant: uuid.Must(uuid.NewV7()), Name: "other"}
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, name) VALUES ($1, 'other')`, other.Tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Create(ctx, other, dag.Resource{Metadata: dag.Metadata{Name: "small"},
		Spec: dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Defaults: one, Steps: []dag.Step{{Name: "work", Run: dag.Executor{Handler: "noop"}}}}}, ""); err != nil {
		t.Fatal(err)
	}
	root, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "top"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	tree := func(cond string) int {
		return enginetest.Int(t, pool, `SELECT count(*) FROM runs WHERE root_run_id = $1 AND `+cond, root.ID)
	}
	refused := func() int {
		return enginetest.Int(t, pool, `SELECT count(*) FROM tasks t JOIN runs r ON r.id = t.run_id
			WHERE (r.root_run_id = $1 OR r.id = $1) AND t.status = 'dead_lettered'
			  AND t.last_error LIKE 'run.job: the tree of run % has 1000 runs besides its root; its tenant''s max_runs_per_tree is 1000 %'`, root.ID)
	}
	// 10,100 job steps: 1,000 start their runs, the others are refused.
	enginetest.WaitFor(t, 3*time.Minute, "the tree reaches its bound, and the calls past it are refused", func() bool {
		return enginetest.Int(t, pool, `SELECT count(*) FROM call_starts`) == 0 && refused() == 100*100+100-1000
	})
	if n, counted := tree("true"), enginetest.Int(t, pool, `SELECT runs FROM run_trees WHERE root_run_id = $1`, root.ID); n != 1000 || counted != 1000 {
		t.Errorf("the tree has %d runs besides its root, run_trees counts %d; want 1000", n, counted)
	}
	small, err := runs.Trigger(ctx, other, job.Ref{Namespace: "default", Name: "small"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "another tenant's run succeeds beside the tree", func() bool { return runStatus(t, pool, small.ID) == "succeeded" })
	var lag float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM min(t.started_at) - r.created_at) FROM runs r JOIN tasks t ON t.run_id = r.id
		WHERE r.id = $1 GROUP BY r.created_at`, small.ID).Scan(&lag); err != nil {
		t.Fatal(err)
	}
	t.Logf("another tenant's run started %.0f ms after it was made (BenchmarkRunTree measures this under load)", lag*1000)

}

// Cancelling the root of a tree of 510 runs answers once the root and the
// first hundred runs below it are cancelled; the rest are left to the
// scheduler (run_cancels, without waiting for a run a worker's report
// holds), which cancels every run of the tree, each with the reason.
func TestATreeIsCancelledInBatches(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"noop": func(context.Context, executor.Call) error { return nil },
		"hold": func(ctx context.Context, _ executor.Call) error { // a leaf runs until it is cancelled
			<-ctx.Done()
			return ctx.Err()
		},
	})
	startPolicyNode(t, pool, node.Config{})
	one := dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}}
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}
	createJob(t, pool, "leaf", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Defaults: one, Steps: []dag.Step{{Name: "work", Run: dag.Executor{Handler: "hold"}}}})
	createJob(t, pool, "mid", calling("leaf", 50, true))
	createJob(t, pool, "top", calling("mid", 10, false))
	_, _, runs := services(t, pool)
	root, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "top"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	tree := func(cond string) int {
		return enginetest.Int(t, pool, `SELECT count(*) FROM runs WHERE root_run_id = $1 AND `+cond, root.ID)
	}
	enginetest.WaitFor(t, 60*time.Second, "the tree has all its runs", func() bool { return tree("true") == 510 })
	// A cancel left for later whose run's step is not cancelled (its run
	// retried meanwhile: the step attached to its child again) cancels
	// nothing: the child would end no step, which would wait for ever.
	child := enginetest.UUID(t, pool, `SELECT id FROM runs WHERE root_run_id = $1 ORDER BY id LIMIT 1`, root.ID)
	if _, err := pool.Exec(ctx, `INSERT INTO run_cancels (run_id, shard, reason, created_at)
		SELECT id, shard, $2, now() FROM runs WHERE id = $1`, child, "cancelled: the run of the step that started it was cancelled"); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "the scheduler takes the cancel", func() bool {
		return enginetest.Int(t, pool, `SELECT count(*) FROM run_cancels`) == 0
	})
	if s := runStatus(t, pool, child); s != "pending" && s != "running" {
		t.Fatalf("a child whose step still waits on it was %s by a cancel meant for an earlier one", s)
	}
	started := time.Now()
	if _, err := runs.CancelRun(ctx, job.Anonymous, root.ID, "enough"); err != nil {
		t.Fatal(err)
	}
	answered := time.Since(started)
	enginetest.WaitFor(t, 60*time.Second, "every run of the tree is cancelled", func() bool { return tree("finished_at IS NULL") == 0 })
	t.Logf("the cancel answered in %s, the tree of 511 runs was cancelled in %s", answered.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	// The runs the cancel's own transaction cancelled end at its now().
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM runs r JOIN runs root ON root.id = $1
		WHERE r.root_run_id = $1 AND r.finished_at = root.finished_at`, root.ID); n != 99 {
		t.Errorf("the cancel's transaction cancelled %d runs below the root, want 99 (100 with the root)", n)
	}
	if n := tree("status = 'cancelled' AND reason = 'cancelled: the run of the step that started it was cancelled'"); n != 510 {
		t.Errorf("%d runs of the tree cancelled with their parents, want 510", n)
	}
	if runStatus(t, pool, root.ID) != "cancelled" {
		t.Errorf("the root is %s", runStatus(t, pool, root.ID))
	}
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM run_cancels`); n != 0 {
		t.Errorf("%d cancels left", n)
	}
}

// A job whose two steps run a job that starts the first again by
// schedule.after doubles its runs at each level (4,093 runs from one
// trigger, before trees were bounded): the tree stops at its tenant's
// max_runs_per_tree (40 here), the after-trigger's runs past it recorded
// skipped and the job steps past it dead-lettered, each naming the bound.
func TestADoublingLoopStopsAtTheTreesBound(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `UPDATE tenants SET max_runs_per_tree = 40 WHERE name = 'default'`); err != nil {
		t.Fatal(err)
	}
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{"noop": func(context.Context, executor.Call) error { return nil }})
	startPolicyNode(t, pool, node.Config{})
	one := dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}}
	createJob(t, pool, "pong", dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}, Overlap: dag.OverlapAllow, Defaults: one,
		Steps: []dag.Step{{Name: "work", Run: dag.Executor{Handler: "noop"}}}})
	ping := calling("pong", 2, false)
	ping.Schedule = schedule.Spec{After: &schedule.After{Job: "pong", On: []string{"succeeded"}}}
	createJob(t, pool, "ping", ping)
	_, _, runs := services(t, pool)
	root, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "ping"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	settled := func() bool {
		return enginetest.Int(t, pool, `SELECT count(*) FROM runs WHERE finished_at IS NULL`) == 0 &&
			enginetest.Int(t, pool, `SELECT count(*) FROM call_starts`) == 0 && enginetest.Int(t, pool, `SELECT count(*) FROM upstream_finishes`) == 0
	}
	enginetest.WaitFor(t, 60*time.Second, "the loop stops", settled)
	withTasks := enginetest.Int(t, pool, `SELECT count(*) FROM runs WHERE root_run_id = $1 AND status <> 'skipped'`, root.ID)
	if withTasks != 40 {
		t.Errorf("%d runs in the tree besides its root, want its bound, 40", withTasks)
	}
	reason := enginetest.Int(t, pool, `SELECT count(*) FROM runs WHERE root_run_id = $1 AND status = 'skipped' AND reason LIKE 'upstream: the tree of run %'`, root.ID) +
		enginetest.Int(t, pool, `SELECT count(*) FROM tasks t JOIN runs r ON r.id = t.run_id
			WHERE (r.root_run_id = $1 OR r.id = $1) AND t.status = 'dead_lettered' AND t.last_error LIKE 'run.job: the tree of run %'`, root.ID)
	if reason == 0 {
		t.Error("nothing past the bound says why it did not run")
	}
	// Settled: no run open, no call or end waiting, so nothing can start
	// again.
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM runs`); n > 1+40+2*40 {
		t.Errorf("%d runs in all", n)
	}
}
