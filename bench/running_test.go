package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
)

// BenchmarkManyRunning: 50,000 attempts running at once (a handler that
// waits), in five worker pools of 10,000 slots (River's bound per queue
// and client; five River clients in this process), while 100 other jobs
// fire every second into another queue.
// Over three lease renewals (lease TTL 15 s: a renewal every 5 s per
// worker) it reports the database's CPU time as a share of one core (all
// PostgreSQL processes, from /proc; renewals and everything else), the
// start lag of the other jobs meanwhile, the Go memory per running task,
// and how many leases lapsed (aim: none). ORRERY_BENCH_RUNNING changes the
// 50,000.
func BenchmarkManyRunning(b *testing.B) {
	n := envInt(b, "ORRERY_BENCH_RUNNING", 50_000)
	for range b.N {
		pool := freshDB(b)
		ctx := context.Background()
		eng := startEngineOn(b, pool, "default", 200)
		release := make(chan struct{})
		hold := func(ctx context.Context, _ executor.Call) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		runtime.GC()
		before := memInUse()
		wctx, stop := context.WithCancel(ctx)
		pools := (n + river.QueueNumWorkersMax - 1) / river.QueueNumWorkersMax
		done := make(chan error, pools)
		for k := range pools {
			w, err := worker.New(worker.Config{StatePool: pool, Queues: map[string]int{"hold": n / pools}, Name: fmt.Sprintf("hold-%d", k),
				Handlers: map[string]executor.HandlerFunc{"hold": hold}, Logger: eng.log})
			if err != nil {
				b.Fatal(err)
			}
			go func() { done <- w.Run(wctx) }()
		}
		b.Cleanup(func() {
			close(release)
			stop()
			for range pools {
				<-done
			}
		})
		at := dbTime(b, pool).Truncate(time.Second).Add(6 * time.Second)
		seedJobs(b, pool, "hold", n, queueSpecIn(cronAt(at), "hold", "hold"), at)
		seedJobs(b, pool, "tick", 100, noopSpec("* * * * * *"), at)
		began := time.Now()
		for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
			var running int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM tasks WHERE queue = 'hold' AND status = 'running'").Scan(&running); err != nil {
				b.Fatal(err)
			}
			if running == n {
				break
			}
			eng.check(b)
			if time.Now().After(deadline) {
				b.Fatalf("deadline passed: %d of %d attempts running", running, n)
			}
		}
		fmt.Fprintf(os.Stderr, "many running: all %d started %s after the seeding\n", n, time.Since(began).Round(100*time.Millisecond))
		runtime.GC()
		perTask := float64(memInUse()-before) / float64(n)
		var goroutines = runtime.NumGoroutine()
		// Three renewals of each worker.
		window := 15 * time.Second
		resetStatements(b, pool)
		from := dbTime(b, pool)
		cpu0 := postgresCPU(b)
		time.Sleep(window)
		cpu := postgresCPU(b) - cpu0
		until := dbTime(b, pool)
		eng.check(b)
		var lapsed, stillRunning int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM attempts WHERE exit_reason = 'lease_expired'),
			(SELECT count(*) FROM tasks WHERE queue = 'hold' AND status = 'running')`).Scan(&lapsed, &stillRunning); err != nil {
			b.Fatal(err)
		}
		if stillRunning != n {
			b.Fatalf("%d of %d attempts still running after the window", stillRunning, n)
		}
		ticks, p50, _, p99, _ := lagStats(b, pool, from.Truncate(time.Second).Add(time.Second), until.Truncate(time.Second))
		b.ReportMetric(100*cpu.Seconds()/window.Seconds(), "db-cpu-%core")
		b.ReportMetric(float64(lapsed), "leases-lapsed")
		b.ReportMetric(perTask/1024, "KiB/running-task")
		b.ReportMetric(float64(goroutines), "goroutines")
		b.ReportMetric(ms(p50), "other-p50-lag-ms")
		b.ReportMetric(ms(p99), "other-p99-lag-ms")
		b.ReportMetric(float64(ticks), "other-runs")
		printRenewals(b, pool, window)
	}
}

// memInUse is the Go heap and stacks in use.
func memInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// postgresCPU is the CPU time (user + system) of every PostgreSQL process
// of this machine so far, from /proc, with that of the backends that have
// exited (their postmaster's reaped children's time). Run benchmarks alone:
// another PostgreSQL on the machine counts too.
func postgresCPU(b *testing.B) time.Duration {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(pid); ok && st.name == "postgres" {
			sum += st.cpu + st.children
		}
	}
	return sum
}

// postgresCPUByDB is postgresCPU per database, from the backends' process
// titles ("postgres: USER DATABASE HOST(PORT) STATE"); background
// processes count under "", backends that have exited under
// exitedBackends (their database is no longer known): the sum is
// postgresCPU.
func postgresCPUByDB(b *testing.B) map[string]time.Duration {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]time.Duration{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := procStat(pid)
		if !ok || st.name != "postgres" {
			continue
		}
		title, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		f := strings.Fields(strings.TrimPrefix(strings.ReplaceAll(string(title), "\x00", " "), "postgres: "))
		db := ""
		if len(f) >= 3 && strings.Contains(f[2], "(") {
			db = f[1]
		}
		out[db] += st.cpu
		out[exitedBackends] += st.children
	}
	return out
}

// exitedBackends is postgresCPUByDB's key for the time of backends that
// have exited, whatever their database.
const exitedBackends = "(exited)"

// procCPU is one process's command name and CPU time (user + system) so
// far, from /proc/PID/stat; ok is false once it has gone.
func procCPU(pid int) (name string, cpu time.Duration, ok bool) {
	st, ok := procStat(pid)
	return st.name, st.cpu, ok
}

// stat is what procStat reads of a process: its command name, its own CPU
// time, and the CPU time of the children it has waited for.
type stat struct {
	name          string
	cpu, children time.Duration
}

func procStat(pid int) (stat, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	s := string(raw)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return stat{}, false
	}
	f := strings.Fields(s[end+2:]) // from field 3 (state) on
	if len(f) < 15 {
		return stat{}, false
	}
	ticks := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * time.Second / 100 // USER_HZ
	}
	// utime, stime, cutime, cstime: fields 14-17.
	return stat{name: s[open+1 : end], cpu: ticks(11) + ticks(12), children: ticks(13) + ticks(14)}, true
}

// selfCPU is this process's CPU time so far (every thread).
func selfCPU(b *testing.B) time.Duration {
	b.Helper()
	_, cpu, ok := procCPU(os.Getpid())
	if !ok {
		b.Fatal("no /proc/self/stat")
	}
	return cpu
}

// resetStatements starts pg_stat_statements afresh (ORRERY_BENCH_STATS).
func resetStatements(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	if os.Getenv("ORRERY_BENCH_STATS") == "" {
		return
	}
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		b.Fatalf("pg_stat_statements: %v", err)
	}
	if _, err := pool.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		b.Fatalf("pg_stat_statements: %v", err)
	}
}

// printRenewals shows, with ORRERY_BENCH_STATS set, the lease renewal
// statement's calls and time since resetStatements, and the statements
// that took most of the database's time in the window.
func printRenewals(b *testing.B, pool *pgxpool.Pool, window time.Duration) {
	b.Helper()
	if os.Getenv("ORRERY_BENCH_STATS") == "" {
		return
	}
	rows, err := pool.Query(context.Background(), `SELECT calls, rows, total_exec_time, left(regexp_replace(query, '\s+', ' ', 'g'), 60)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC LIMIT 8`)
	if err != nil {
		b.Fatalf("pg_stat_statements: %v", err)
	}
	defer rows.Close()
	fmt.Fprintf(os.Stderr, "statements in the %s window (calls, rows, total ms, share of one core):\n", window)
	for rows.Next() {
		var calls, n int64
		var total float64
		var q string
		if err := rows.Scan(&calls, &n, &total, &q); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "  %6d %8d %9.0f %5.1f%%  %s\n", calls, n, total, 100*total/float64(window.Milliseconds()), q)
	}
}
