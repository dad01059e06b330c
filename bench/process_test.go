package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
)

// BenchmarkStormProcesses is the midnight storm as users deploy it: `orrery
// serve` (API and scheduler node) and `orrery worker` processes (500 slots
// in all, as in the in-process storm), 10,000 jobs of one `http` step
// posting to a local sink (an httptest server in this process). Reports
// what BenchmarkMidnightStorm reports, and the CPU each part spent per run
// (serve, the workers, PostgreSQL) over the storm and, before it, while
// idle (the scheduler's passes over its shards): the figures
// docs/scaling.md's model is built from. Its variants check the model's
// slope: one worker process instead of two, 256 shards instead of 64.
func BenchmarkStormProcesses(b *testing.B) {
	for _, v := range []struct {
		name            string
		workers, shards int
		queueDB         bool
	}{{"workers=2", 2, 64, false}, {"workers=1", 1, 64, false}, {"workers=2,shards=256", 2, 256, false}, {"workers=2,queue-db", 2, 64, true}} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				stormProcesses(b, v.workers, v.shards, v.queueDB)
			}
		})
	}
}

// stormProcesses runs the storm once with serve and workers processes over
// a fresh database of shards shards; with queueDB, River's tables are in a
// database of their own (--queue-db), and PostgreSQL's CPU is reported per
// database too.
func stormProcesses(b *testing.B, workers, shards int, queueDB bool) {
	const jobs = 10_000
	pool, dsn := freshDBDSN(b)
	if _, err := pool.Exec(context.Background(), "UPDATE cluster_settings SET shard_count = $1", shards); err != nil {
		b.Fatal(err)
	}
	var dbArgs []string
	stateName, queueName := pool.Config().ConnConfig.Database, ""
	if queueDB {
		qpool, qdsn := freshDBDSN(b)
		queueName = qpool.Config().ConnConfig.Database
		dbArgs = []string{"--queue-db", qdsn}
	}
	var hits atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(sink.Close)
	servePID := startOrrery(b, "serve", append([]string{"serve", "--db", dsn, "--addr", freeAddr(), "--log-level", "warn", "--auth", "none"}, dbArgs...)...)
	var workerPIDs []int
	for k := range workers {
		workerPIDs = append(workerPIDs, startOrrery(b, fmt.Sprintf("worker %d", k), append([]string{"worker", "--db", dsn, "--queue", fmt.Sprintf("default=%d", 500/workers),
			"--name", fmt.Sprintf("w%d", k), "--allow-egress", "127.0.0.1/32", "--log-level", "warn"}, dbArgs...)...))
	}
	var byDB [3]map[string]time.Duration // at the three snapshots
	snap := 0
	cpu := func() (serve, work, pg time.Duration) {
		_, serve, _ = procCPU(servePID)
		for _, pid := range workerPIDs {
			_, c, _ := procCPU(pid)
			work += c
		}
		if queueDB {
			byDB[snap] = postgresCPUByDB(b)
			snap++
		}
		return serve, work, postgresCPU(b)
	}
	at := dbTime(b, pool).Truncate(time.Second).Add(12 * time.Second)
	r := dag.Resource{Metadata: dag.Metadata{Name: "x"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons(cronAt(at))}, Overlap: dag.OverlapAllow,
		Run: &dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL + "/hook"}},
	}}
	r.Normalize()
	seedJobs(b, pool, "storm", jobs, r.Spec, at)
	time.Sleep(600 * time.Millisecond)
	wal0, walB0 := walRecords(b, pool), walBytes(b, pool)
	// Idle: 5 s before the instant, the processes only tick (the
	// benchmark's clock and the database's agree to a few ms here).
	const idle = 5 * time.Second
	time.Sleep(time.Until(at.Add(-idle - 200*time.Millisecond)))
	s0, w0, p0 := cpu()
	time.Sleep(idle)
	s1, w1, p1 := cpu()
	t1 := time.Now()
	time.Sleep(time.Until(at))
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var done int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM runs WHERE status = 'succeeded'").Scan(&done); err != nil {
			b.Fatal(err)
		}
		if done == jobs {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("deadline passed: %d of %d runs succeeded within 3 minutes", done, jobs)
		}
	}
	s2, w2, p2 := cpu()
	window := time.Since(t1)
	checkNoFailures(b, pool)
	time.Sleep(600 * time.Millisecond)
	walPerRun := float64(walRecords(b, pool)-wal0) / jobs
	walBytesPerRun := float64(walBytes(b, pool)-walB0) / jobs
	n, p50, _, p99, mx := lagStats(b, pool, at, at.Add(time.Second))
	if n != jobs {
		b.Fatalf("%d of %d runs started for the instant", n, jobs)
	}
	var lastDone, lastCreated time.Time
	if err := pool.QueryRow(context.Background(), "SELECT max(finished_at), max(created_at) FROM runs").Scan(&lastDone, &lastCreated); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "storm in processes (%d workers, %d shards): the sink saw %d calls\n", workers, shards, hits.Load())
	b.ReportMetric(ms(lastCreated.Sub(at)), "all-created-ms")
	b.ReportMetric(ms(mx), "all-started-ms")
	b.ReportMetric(ms(p50), "p50-lag-ms")
	b.ReportMetric(ms(p99), "p99-lag-ms")
	b.ReportMetric(float64(jobs)/lastDone.Sub(at).Seconds(), "completed/s")
	b.ReportMetric(walPerRun, "wal-records/run")
	b.ReportMetric(walBytesPerRun, "wal-bytes/run")
	// CPU per run over the storm (the idle rate taken out), and the idle
	// rates in % of one core.
	perRun := func(busy, idleCPU time.Duration) float64 {
		return (ms(busy) - ms(idleCPU)*ms(window)/ms(idle)) / jobs
	}
	b.ReportMetric(perRun(s2-s1, s1-s0), "serve-cpu-ms/run")
	b.ReportMetric(perRun(w2-w1, w1-w0), "workers-cpu-ms/run")
	b.ReportMetric(perRun(p2-p1, p1-p0), "pg-cpu-ms/run")
	if queueDB {
		b.ReportMetric(perRun(byDB[2][stateName]-byDB[1][stateName], byDB[1][stateName]-byDB[0][stateName]), "pg-state-cpu-ms/run")
		b.ReportMetric(perRun(byDB[2][queueName]-byDB[1][queueName], byDB[1][queueName]-byDB[0][queueName]), "pg-queue-cpu-ms/run")
		x := exitedBackends
		b.ReportMetric(perRun(byDB[2][x]-byDB[1][x], byDB[1][x]-byDB[0][x]), "pg-exited-cpu-ms/run")
	}
	b.ReportMetric(100*ms(s1-s0)/ms(idle), "serve-idle-%cpu")
	b.ReportMetric(100*ms(w1-w0)/ms(idle), "workers-idle-%cpu")
	b.ReportMetric(100*ms(p1-p0)/ms(idle), "pg-idle-%cpu")
}
