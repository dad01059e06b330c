package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	orun "github.com/orrery-dev/orrery/internal/run"
)

// BenchmarkNoisyNeighbour: tenant A triggers 20 runs of a pipeline of
// 10,000 steps (a chain: each step needs the one before) whose first step
// fails for good, so that each failure settles 9,999 descendants
// (upstream_failed); meanwhile tenant B triggers a one-step no-op run
// every 100 ms, in the same queue and worker pool (100 slots). Reported:
// B's runs from trigger to finish (p50, p99, max; aim p99 under 1 s), how
// long A's 20 runs took to fail, and the errors the engine logged (a
// report batch timing out, for one).
func BenchmarkNoisyNeighbour(b *testing.B) {
	const aRuns, steps = 20, 10_000
	for range b.N {
		pool := freshDB(b)
		ctx := context.Background()
		a := benchTenant(b, pool, "tenant-a", 1)
		bt := benchTenant(b, pool, "tenant-b", 1)
		eng := startEngineOn(b, pool, "q", 100)
		jobs, err := job.New(ctx, pool, nil)
		if err != nil {
			b.Fatal(err)
		}
		chain := []dag.Step{{Name: "s00000", Run: dag.Executor{Handler: "fail"}}}
		for i := 1; i < steps; i++ {
			chain = append(chain, dag.Step{Name: fmt.Sprintf("s%05d", i), Needs: []string{fmt.Sprintf("s%05d", i-1)}, Run: dag.Executor{Handler: "noop"}})
		}
		pipeline := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow, Steps: chain,
			Defaults: dag.StepDefaults{Queue: "q", Retry: &dag.Retry{MaxAttempts: 1}}}
		actorA, actorB := job.Actor{Tenant: a, Name: "bench"}, job.Actor{Tenant: bt, Name: "bench"}
		if _, err := jobs.Create(ctx, actorA, dag.Resource{Metadata: dag.Metadata{Name: "pipeline"}, Spec: pipeline}, ""); err != nil {
			b.Fatal(err)
		}
		if _, err := jobs.Create(ctx, actorB, dag.Resource{Metadata: dag.Metadata{Name: "small"}, Spec: queueSpec("@yearly", "noop")}, ""); err != nil {
			b.Fatal(err)
		}
		runs := orun.NewService(pool, jobs, eng.dispatcher)
		stop := make(chan struct{})
		small := triggerEvery(eng, runs, actorB, "small", 100*time.Millisecond, stop)
		time.Sleep(2 * time.Second) // B alone, for a baseline
		start := dbTime(b, pool)
		var big sync.WaitGroup
		for range aRuns {
			big.Go(func() {
				if _, err := runs.Trigger(ctx, actorA, job.Ref{Namespace: "default", Name: "pipeline"}, "", true); err != nil {
					eng.fail("trigger A: " + err.Error())
				}
			})
		}
		big.Wait()
		created := dbTime(b, pool).Sub(start)
		waitFinished(b, pool, a, "A", 10*time.Minute)
		settled := dbTime(b, pool).Sub(start)
		time.Sleep(2 * time.Second)
		close(stop)
		small.Wait()
		waitFinished(b, pool, bt, "B", 2*time.Minute)
		var n, failedA int
		var p50, p99, worst float64
		if err := pool.QueryRow(ctx, `SELECT count(*),
				percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)),
				percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)),
				max(extract(epoch FROM finished_at - created_at))
			FROM runs WHERE tenant_id = $1 AND created_at >= $2 AND status = 'succeeded'`, bt, start).Scan(&n, &p50, &p99, &worst); err != nil {
			b.Fatal(err)
		}
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM runs WHERE tenant_id = $1 AND status IN ('failed', 'dead_lettered')", a).Scan(&failedA); err != nil {
			b.Fatal(err)
		}
		if failedA != aRuns {
			b.Fatalf("%d of A's %d runs failed, want all; engine errors: %q", failedA, aRuns, eng.takeFailures())
		}
		errs := eng.takeFailures()
		fmt.Fprintf(os.Stderr, "noisy: A's %d runs of %d steps created in %s, all failed %s after the first trigger; B's %d runs meanwhile: p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d engine errors\n",
			aRuns, steps, created.Round(time.Millisecond), settled.Round(time.Millisecond), n, p50*1000, p99*1000, worst*1000, len(errs))
		for _, e := range errs[:min(len(errs), 3)] {
			fmt.Fprintln(os.Stderr, "noisy: engine error:", e)
		}
		b.ReportMetric(p50*1000, "b-p50-ms")
		b.ReportMetric(p99*1000, "b-p99-ms")
		b.ReportMetric(worst*1000, "b-max-ms")
		b.ReportMetric(settled.Seconds(), "a-settled-s")
		b.ReportMetric(float64(len(errs)), "engine-errors")
	}
}

// triggerEvery triggers job (namespace default) as actor every interval
// until stop is closed; wait on what it returns.
func triggerEvery(eng *engine, runs *orun.Service, actor job.Actor, name string, every time.Duration, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for tick := time.NewTicker(every); ; {
			select {
			case <-stop:
				tick.Stop()
				return
			case <-tick.C:
			}
			if _, err := runs.Trigger(context.Background(), actor, job.Ref{Namespace: "default", Name: name}, "", true); err != nil {
				eng.fail("trigger " + name + ": " + err.Error())
			}
		}
	})
	return &wg
}

// waitFinished waits until every run of the tenant has finished.
func waitFinished(b *testing.B, pool *pgxpool.Pool, tenant uuid.UUID, who string, within time.Duration) {
	b.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		var open int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM runs WHERE tenant_id = $1 AND finished_at IS NULL", tenant).Scan(&open); err != nil {
			b.Fatal(err)
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s's runs still open after %s: %d", who, within, open)
		}
	}
}
