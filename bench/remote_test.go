package bench

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/gateway"
	"github.com/orrery-dev/orrery/internal/job"
	runpkg "github.com/orrery-dev/orrery/internal/run"
)

// BenchmarkRemoteWorkers: 5,000 one-step runs due at one instant, run by
// no-op remote workers polling WorkerService over Connect's JSON (as the
// Python worker does: claim up to 50, report each at once), 1, 4 or 16
// of them, against the same runs in an in-process worker pool (500
// slots). It reports runs per second from the instant to the last
// success, and the release-to-start latency of the attempts (for a
// remote one, the gateway's offer and the claim in between).
//
//	go test -run '^$' -bench RemoteWorkers -benchtime 1x ./bench/
func BenchmarkRemoteWorkers(b *testing.B) {
	for _, workers := range []int{0, 1, 4, 16} {
		name := fmt.Sprintf("remote=%d", workers)
		if workers == 0 {
			name = "in-process"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				remoteStorm(b, workers)
			}
		})
	}
}

func remoteStorm(b *testing.B, remote int) {
	const jobs = 5_000
	pool := freshDB(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var eng *engine
	var spec dag.JobSpec
	at := dbTime(b, pool).Truncate(time.Second).Add(8 * time.Second)
	cron := fmt.Sprintf("%d %d %d * * *", at.Second(), at.Minute(), at.Hour())
	var handled atomic.Int64
	if remote == 0 {
		eng = startEngine(b, pool, 500)
		spec = noopSpec(cron)
	} else {
		eng = startEngine(b, pool, 1) // its node: scheduler, reaper; its worker serves nothing of these
		r := dag.Resource{Metadata: dag.Metadata{Name: "x"}, Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons(cron)}, Overlap: dag.OverlapAllow,
			Run: &dag.Executor{Worker: "noop"}}}
		r.Normalize()
		spec = r.Spec
		gw, err := gateway.New(gateway.Config{StatePool: pool, Logger: eng.log})
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = gw.Run(ctx) }()
		jobs, err := job.New(ctx, pool, nil)
		if err != nil {
			b.Fatal(err)
		}
		srv, err := api.Listen("127.0.0.1:0", api.NewHandler(api.Services{Jobs: jobs, Runs: runpkg.NewService(pool, jobs, eng.dispatcher), State: pool,
			Auth: api.NoAuth{}, Gateway: gw}, eng.log))
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = srv.Serve(ctx) }()
		client := orreryv1connect.NewWorkerServiceClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}},
			"http://"+srv.Addr(), connect.WithProtoJSON())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		for i := range remote {
			wg.Go(func() { remoteNoop(ctx, client, fmt.Sprintf("w%d", i), &handled) })
		}
	}
	seedJobs(b, pool, "remote", jobs, spec, at)
	time.Sleep(time.Until(at))
	deadline := time.Now().Add(3 * time.Minute)
	count := func() int64 {
		if remote == 0 {
			return eng.handled.Load()
		}
		return handled.Load()
	}
	for count() < jobs && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		eng.check(b)
	}
	var done int
	var last time.Time
	for ; ; time.Sleep(50 * time.Millisecond) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'succeeded'), COALESCE(max(finished_at), now()) FROM runs`).Scan(&done, &last); err != nil {
			b.Fatal(err)
		}
		if done == jobs {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d runs succeeded within 3 minutes", done, jobs)
		}
	}
	checkNoFailures(b, pool)
	took := last.Sub(at)
	p50, p99 := releaseToStart(b, pool)
	b.ReportMetric(float64(jobs)/took.Seconds(), "runs/s")
	b.ReportMetric(float64(p50.Milliseconds()), "start-p50-ms")
	b.ReportMetric(float64(p99.Milliseconds()), "start-p99-ms")
	b.Logf("%d runs in %.2f s after the instant: %.0f runs/s; release to start p50 %s, p99 %s", jobs, took.Seconds(),
		float64(jobs)/took.Seconds(), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
}

// remoteNoop is a remote worker that succeeds at once: it claims up to 50
// attempts and reports their ends in one call (ends), as a worker that
// runs a batch reports it.
func remoteNoop(ctx context.Context, c orreryv1connect.WorkerServiceClient, name string, handled *atomic.Int64) {
	wait := int32(5)
	for ctx.Err() == nil {
		res, err := c.Claim(ctx, connect.NewRequest(&orreryv1.ClaimRequest{Worker: name, Types: []string{"noop"}, MaxTasks: 50,
			WaitSeconds: &wait, Slots: 50}))
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var ends []*orreryv1.AttemptEnd
		for _, t := range res.Msg.GetTasks() {
			ends = append(ends, &orreryv1.AttemptEnd{TaskId: t.GetTaskId(), FencingToken: t.GetFencingToken(), Success: true})
		}
		for len(ends) > 0 && ctx.Err() == nil {
			if _, err := c.Report(ctx, connect.NewRequest(&orreryv1.ReportRequest{Worker: name, Ends: ends})); err == nil {
				handled.Add(int64(len(ends)))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// releaseToStart is the p50 and p99 of the attempts' start after their
// task's release.
func releaseToStart(b *testing.B, pool *pgxpool.Pool) (time.Duration, time.Duration) {
	b.Helper()
	var p50, p99 float64
	if err := pool.QueryRow(context.Background(), `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s), percentile_cont(0.99) WITHIN GROUP (ORDER BY s)
		FROM (SELECT extract(epoch FROM a.started_at - t.released_at) AS s FROM tasks t JOIN attempts a ON a.task_id = t.id AND a.number = 1) AS x`).
		Scan(&p50, &p99); err != nil {
		b.Fatal(err)
	}
	return time.Duration(p50 * float64(time.Second)), time.Duration(p99 * float64(time.Second))
}
