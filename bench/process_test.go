package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
)

// BenchmarkStormProcesses is the midnight storm as users deploy it: `orrery
// serve` (API and scheduler node) and two `orrery worker` processes (250
// slots each, 500 in all as in the in-process storm), 10,000 jobs of one
// `http` step posting to a local sink (an httptest server in this
// process). Reports what BenchmarkMidnightStorm reports; run both in one
// command to compare.
func BenchmarkStormProcesses(b *testing.B) {
	const jobs = 10_000
	for range b.N {
		pool, dsn := freshDBDSN(b)
		var hits atomic.Int64
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		b.Cleanup(sink.Close)
		start := func(name string, args ...string) {
			cmd := exec.Command(orreryBin, args...)
			var logs lockedBuffer
			cmd.Stdout, cmd.Stderr = &logs, &logs
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				_ = cmd.Wait()
				if errs := errorLines(logs.String()); len(errs) > 0 {
					b.Errorf("%s logged errors:\n%s", name, strings.Join(errs, "\n"))
				}
			})
		}
		start("serve", "serve", "--db", dsn, "--addr", freeAddr(), "--log-level", "warn", "--auth", "none")
		for k := range 2 {
			start(fmt.Sprintf("worker %d", k), "worker", "--db", dsn, "--queue", "default=250", "--name", fmt.Sprintf("w%d", k),
				"--allow-egress", "127.0.0.1/32", "--log-level", "warn")
		}
		at := dbTime(b, pool).Truncate(time.Second).Add(10 * time.Second)
		r := dag.Resource{Metadata: dag.Metadata{Name: "x"}, Spec: dag.JobSpec{
			Schedule: schedule.Spec{Cron: cronAt(at)}, Overlap: dag.OverlapAllow,
			Run: &dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL + "/hook"}},
		}}
		r.Normalize()
		seedJobs(b, pool, "storm", jobs, r.Spec, at)
		time.Sleep(600 * time.Millisecond)
		wal0 := walRecords(b, pool)
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
		checkNoFailures(b, pool)
		time.Sleep(600 * time.Millisecond)
		walPerRun := float64(walRecords(b, pool)-wal0) / jobs
		n, p50, _, p99, mx := lagStats(b, pool, at, at.Add(time.Second))
		if n != jobs {
			b.Fatalf("%d of %d runs started for the instant", n, jobs)
		}
		var lastDone, lastCreated time.Time
		if err := pool.QueryRow(context.Background(), "SELECT max(finished_at), max(created_at) FROM runs").Scan(&lastDone, &lastCreated); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "storm in processes: the sink saw %d calls\n", hits.Load())
		b.ReportMetric(ms(lastCreated.Sub(at)), "all-created-ms")
		b.ReportMetric(ms(mx), "all-started-ms")
		b.ReportMetric(ms(p50), "p50-lag-ms")
		b.ReportMetric(ms(p99), "p99-lag-ms")
		b.ReportMetric(float64(jobs)/lastDone.Sub(at).Seconds(), "completed/s")
		b.ReportMetric(walPerRun, "wal-records/run")
	}
}
