package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	orun "github.com/orrery-dev/orrery/internal/run"
)

// BenchmarkRunTree: tenant A triggers one run of a job whose 100 steps
// each run a job whose 100 steps each run a one-step job (200 ms): a tree
// of 10,101 runs (its tenant's max_runs_per_tree raised to allow it,
// ORRERY_BENCH_TREE_CAP, default 20,000); meanwhile tenant B triggers a
// one-step no-op run every 100 ms, in the same queue and worker pool (100
// slots). Once the tree has ORRERY_BENCH_TREE_CANCEL_AT runs (default
// 10,000), A cancels its root. Reported: how long the tree took to reach
// them, how long the cancel call took and how long until every run of A
// had ended, and B's runs from creation to start (p50, p99, max; aim p99
// under 1 s) while the tree grew and while it was cancelled.
// ORRERY_BENCH_TREE_DIAG=1 prints, every 250 ms of the cancel, what waits
// where, and where B's starts spent their time.
func BenchmarkRunTree(b *testing.B) {
	const width = 100
	for range b.N {
		pool := freshDB(b)
		ctx := context.Background()
		a := benchTenant(b, pool, "tenant-a", 1)
		bt := benchTenant(b, pool, "tenant-b", 1)
		if _, err := pool.Exec(ctx, "UPDATE tenants SET max_runs_per_tree = $2 WHERE id = $1", a, envInt(b, "ORRERY_BENCH_TREE_CAP", 20_000)); err != nil {
			fmt.Fprintln(os.Stderr, "tree: no max_runs_per_tree (an older schema):", err)
		}
		eng := startEngineOn(b, pool, "q", 100)
		jobs, err := job.New(ctx, pool, nil)
		if err != nil {
			b.Fatal(err)
		}
		never := schedule.Spec{Cron: schedule.Crons("@yearly")}
		one := dag.StepDefaults{Queue: "q", Retry: &dag.Retry{MaxAttempts: 1}}
		calls := func(job string, first bool) []dag.Step {
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
			return steps
		}
		actorA, actorB := job.Actor{Tenant: a, Name: "bench"}, job.Actor{Tenant: bt, Name: "bench"}
		for _, j := range []struct {
			name string
			spec dag.JobSpec
		}{
			{"leaf", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Defaults: one, Steps: []dag.Step{{Name: "work", Run: dag.Executor{Handler: "sleep"}}}}},
			{"mid", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Defaults: one, Steps: calls("leaf", true)}},
			{"top", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Defaults: one, Steps: calls("mid", false)}},
		} {
			if _, err := jobs.Create(ctx, actorA, dag.Resource{Metadata: dag.Metadata{Name: j.name}, Spec: j.spec}, ""); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := jobs.Create(ctx, actorB, dag.Resource{Metadata: dag.Metadata{Name: "small"}, Spec: queueSpec("@yearly", "noop")}, ""); err != nil {
			b.Fatal(err)
		}
		runs := orun.NewService(pool, jobs, eng.dispatcher)
		stop := make(chan struct{})
		small := triggerEvery(eng, runs, actorB, "small", 100*time.Millisecond, stop)
		time.Sleep(2 * time.Second) // B alone, for a baseline
		start := dbTime(b, pool)
		root, err := runs.Trigger(ctx, actorA, job.Ref{Namespace: "default", Name: "top"}, "", true)
		if err != nil {
			b.Fatal(err)
		}
		cancelAt := envInt(b, "ORRERY_BENCH_TREE_CANCEL_AT", 10_000)
		grown := waitRuns(b, pool, a, cancelAt, 10*time.Minute)
		cancelled := dbTime(b, pool)
		diagDone := make(chan struct{})
		if os.Getenv("ORRERY_BENCH_TREE_DIAG") != "" {
			go func() {
				for range 40 {
					select {
					case <-diagDone:
						return
					case <-time.After(250 * time.Millisecond):
					}
					var aIn, aWait, bWait, bIn, cancels, openA int
					_ = pool.QueryRow(ctx, `SELECT
						count(*) FILTER (WHERE tenant_id = $1 AND admitted_at IS NOT NULL AND status IN ('queued','running','retrying')),
						count(*) FILTER (WHERE tenant_id = $1 AND admitted_at IS NULL AND status IN ('queued','retrying')),
						count(*) FILTER (WHERE tenant_id = $2 AND admitted_at IS NULL AND status IN ('queued','retrying')),
						count(*) FILTER (WHERE tenant_id = $2 AND admitted_at IS NOT NULL AND status IN ('queued','running','retrying')),
						(SELECT count(*) FROM run_cancels), (SELECT count(*) FROM runs WHERE tenant_id = $1 AND finished_at IS NULL)
						FROM tasks`, a, bt).Scan(&aIn, &aWait, &bWait, &bIn, &cancels, &openA)
					fmt.Fprintf(os.Stderr, "tree: diag A in flight %d waiting %d; B in flight %d waiting %d; run_cancels %d; A open runs %d\n", aIn, aWait, bIn, bWait, cancels, openA)
				}
			}()
		}
		t0 := time.Now()
		if _, err := runs.CancelRun(ctx, actorA, root.ID, "bench"); err != nil {
			b.Fatal(err)
		}
		cancelCall := time.Since(t0)
		waitFinished(b, pool, a, "A", 10*time.Minute)
		close(diagDone)
		ended := dbTime(b, pool).Sub(cancelled)
		end := dbTime(b, pool)
		time.Sleep(2 * time.Second)
		close(stop)
		small.Wait()
		waitFinished(b, pool, bt, "B", 2*time.Minute)
		var total int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM runs WHERE tenant_id = $1", a).Scan(&total); err != nil {
			b.Fatal(err)
		}
		nGrow, g50, g99, gMax := startLag(b, pool, bt, start, cancelled)
		nCancel, c50, c99, cMax := startLag(b, pool, bt, cancelled, end)
		if os.Getenv("ORRERY_BENCH_TREE_DIAG") != "" {
			for _, w := range []struct {
				name       string
				from, upTo time.Time
			}{{"grow", start, cancelled}, {"cancel", cancelled, end}} {
				var toRiver, toFetch, toStart float64
				if err := pool.QueryRow(ctx, `SELECT coalesce(percentile_cont(0.9) WITHIN GROUP (ORDER BY 1000 * extract(epoch FROM j.created_at - r.created_at)), 0),
						coalesce(percentile_cont(0.9) WITHIN GROUP (ORDER BY 1000 * extract(epoch FROM j.attempted_at - j.created_at)), 0),
						coalesce(percentile_cont(0.9) WITHIN GROUP (ORDER BY 1000 * extract(epoch FROM t.started_at - j.attempted_at)), 0)
					FROM runs r JOIN tasks t ON t.run_id = r.id JOIN river_job j ON (j.args->>'task_id')::uuid = t.id
					WHERE r.tenant_id = $1 AND r.created_at >= $2 AND r.created_at < $3`, bt, w.from, w.upTo).Scan(&toRiver, &toFetch, &toStart); err != nil {
					fmt.Fprintln(os.Stderr, "tree: diag:", err)
				}
				fmt.Fprintf(os.Stderr, "tree: %s: B's p90 created->river %.0f ms, river->fetched %.0f ms, fetched->started %.0f ms\n", w.name, toRiver, toFetch, toStart)
			}
		}
		errs := eng.takeFailures()
		fmt.Fprintf(os.Stderr, "tree: %d runs of A; %d after %s; cancel call %s, every run of A ended %s after it; B's starts while the tree grew (%d): p50 %.0f ms, p99 %.0f ms, max %.0f ms; while it was cancelled (%d): p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d engine errors\n",
			total, cancelAt, grown.Sub(start).Round(time.Millisecond), cancelCall.Round(time.Millisecond), ended.Round(time.Millisecond),
			nGrow, g50, g99, gMax, nCancel, c50, c99, cMax, len(errs))
		for _, e := range errs[:min(len(errs), 3)] {
			fmt.Fprintln(os.Stderr, "tree: engine error:", e)
		}
		b.ReportMetric(cancelCall.Seconds(), "cancel-call-s")
		b.ReportMetric(ended.Seconds(), "cancelled-s")
		b.ReportMetric(g99, "b-grow-p99-ms")
		b.ReportMetric(c99, "b-cancel-p99-ms")
	}
}

// waitRuns waits until the tenant has n runs, and returns when (the
// database's clock).
func waitRuns(b *testing.B, pool *pgxpool.Pool, tenant uuid.UUID, n int, within time.Duration) time.Time {
	b.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		var have int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM runs WHERE tenant_id = $1", tenant).Scan(&have); err != nil {
			b.Fatal(err)
		}
		if have >= n {
			return dbTime(b, pool)
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d runs after %s, want %d", have, within, n)
		}
	}
}

// startLag is how long the tenant's runs created in [from, until) took
// from creation to their first task's start, in milliseconds.
func startLag(b *testing.B, pool *pgxpool.Pool, tenant uuid.UUID, from, until time.Time) (n int, p50, p99, worst float64) {
	b.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT count(*),
			coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), 0),
			coalesce(max(lag), 0)
		FROM (SELECT 1000 * extract(epoch FROM min(t.started_at) - r.created_at) AS lag
			FROM runs r JOIN tasks t ON t.run_id = r.id
			WHERE r.tenant_id = $1 AND r.created_at >= $2 AND r.created_at < $3 GROUP BY r.id, r.created_at) AS l`,
		tenant, from, until).Scan(&n, &p50, &p99, &worst); err != nil {
		b.Fatal(err)
	}
	return n, p50, p99, worst
}
