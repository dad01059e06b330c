package bench

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/pgcluster"
)

// serverURL is an `orrery serve` started by TestMain against a durable
// PostgreSQL (fsync on, synchronous_commit on) on the same machine;
// cluster is that PostgreSQL, where engine benchmarks make fresh databases.
var (
	// orreryBin is the binary TestMain built (benchmarks of processes).
	orreryBin string
	serverURL string
	// apiKey authenticates the benchmark's calls; empty with
	// ORRERY_BENCH_AUTH=none, which runs the server without authentication.
	apiKey  string
	cluster *pgcluster.Cluster
)

func TestMain(m *testing.M) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400) // as the orrery binary runs (cmd/orrery, defaultGCPercent)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		return m.Run() // no benchmark asked for: start nothing
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "orrery-bench-")
	if err != nil {
		return fail(err)
	}
	if os.Getenv("ORRERY_BENCH_EXPLAIN") == "" {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "bench: PostgreSQL's log (with plans) stays in", dir)
	}
	_ = os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "orrery")
	orreryBin = bin
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/orrery").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("build: %v\n%s", err, out))
	}
	settings := map[string]string{"max_connections": "300"}
	if os.Getenv("ORRERY_BENCH_STATS") != "" {
		settings["shared_preload_libraries"] = "pg_stat_statements"
	}
	if os.Getenv("ORRERY_BENCH_WALDUMP") != "" { // the storm's WAL by record type (pg_waldump)
		settings["wal_keep_size"] = "8GB"
		walDir = filepath.Join(dir, "pg", "data", "pg_wal")
	}
	if v := os.Getenv("ORRERY_BENCH_EXPLAIN"); v != "" { // log plans of statements slower than v ms
		settings["shared_preload_libraries"] = "auto_explain"
		settings["auto_explain.log_min_duration"] = v
		settings["auto_explain.log_analyze"] = "on"
		settings["auto_explain.log_buffers"] = "on"
		settings["auto_explain.log_timing"] = "on"
		settings["auto_explain.log_nested_statements"] = "on"
		// What else stalls statements: lock waits, checkpoints, autovacuum.
		settings["log_lock_waits"] = "on"
		settings["deadlock_timeout"] = "100ms"
		settings["log_checkpoints"] = "on"
		settings["log_autovacuum_min_duration"] = "0"
	}
	cluster, err = pgcluster.Start(ctx, pgcluster.Config{Dir: filepath.Join(dir, "pg"), Settings: settings})
	if err != nil {
		return fail(err)
	}
	defer cluster.Stop()
	if out, err := exec.Command(bin, "migrate", "up", "--db", cluster.DSN("")).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("migrate: %v\n%s", err, out))
	}
	auth := "keys"
	if os.Getenv("ORRERY_BENCH_AUTH") == "none" {
		auth = "none"
	} else {
		out, err := exec.Command(bin, "keys", "create", "--db", cluster.DSN(""), "--principal", "bench", "--role", "editor").Output()
		if err != nil {
			return fail(fmt.Errorf("keys create: %w", err))
		}
		apiKey = strings.TrimSpace(string(out))
	}
	addr := freeAddr()
	serve := exec.Command(bin, "serve", "--db", cluster.DSN(""), "--addr", addr, "--log-level", "warn", "--auth", auth)
	var logs lockedBuffer // written by exec's copying goroutine while we read it
	serve.Stdout, serve.Stderr = &logs, &logs
	if err := serve.Start(); err != nil {
		return fail(err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
			return fmt.Errorf("stop orrery serve: %w (it exited early?)\n%s", err, logs.String())
		}
		if err := serve.Wait(); err != nil {
			return fmt.Errorf("orrery serve: %w\n%s", err, logs.String())
		}
		return nil
	}
	defer func() { _ = stop() }() // on the early returns below
	serverURL = "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Post(serverURL+"/grpc.health.v1.Health/Check", "application/json", bytes.NewReader([]byte("{}")))
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("orrery serve did not start:\n%s", logs.String()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	code := m.Run()
	// The server's errors are the figures' errors too: a benchmark that
	// passed while the server logged errors (or died) measured something
	// else. Only what it logged before the stop counts.
	errs := errorLines(logs.String())
	if err := stop(); err != nil {
		code = fail(err)
	}
	if len(errs) > 0 {
		code = fail(fmt.Errorf("orrery serve logged %d errors during the benchmarks:\n%s", len(errs), strings.Join(errs[:min(len(errs), 20)], "\n")))
	}
	if os.Getenv("ORRERY_BENCH_STATS") != "" {
		conn, err := pgx.Connect(ctx, cluster.DSN(""))
		if err != nil {
			return fail(fmt.Errorf("statistics: %w", err))
		}
		defer conn.Close(ctx)
		var commits, rollbacks int64
		if err := conn.QueryRow(ctx, "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&commits, &rollbacks); err != nil {
			return fail(fmt.Errorf("statistics: %w", err))
		}
		fmt.Fprintf(os.Stderr, "bench: database commits %d, rollbacks %d\n", commits, rollbacks)
		if err := printTopStatements(ctx, conn); err != nil {
			return fail(fmt.Errorf("pg_stat_statements: %w", err))
		}
	}
	return code
}

// lockedBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// errorLines are the ERROR records of a log in slog's text format.
func errorLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return out
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "bench:", err)
	return 1
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// printTopStatements lists the statements that took most of PostgreSQL's
// time over the whole benchmark run (ORRERY_BENCH_STATS set).
func printTopStatements(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return err
	}
	// WAL records and shared buffers touched are the statement's own work,
	// whatever else the two cores were doing meanwhile.
	rows, err := conn.Query(ctx, `SELECT calls, rows, round(total_exec_time::numeric, 0), round(mean_exec_time::numeric, 3),
		wal_records, shared_blks_hit + shared_blks_read, left(regexp_replace(query, '\s+', ' ', 'g'), 90)
		FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(os.Stderr, "%9s %9s %9s %8s %9s %10s  %s\n", "calls", "rows", "total ms", "mean ms", "WAL recs", "buffers", "query")
	for rows.Next() {
		var calls, n, wal, blks int64
		var total, mean float64
		var q string
		if err := rows.Scan(&calls, &n, &total, &mean, &wal, &blks, &q); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%9d %9d %9.0f %8.3f %9d %10d  %s\n", calls, n, total, mean, wal, blks, q)
	}
	return rows.Err()
}

// startOrrery starts an orrery process with args until the benchmark ends
// (SIGTERM), failing it if the process logged errors; it returns its pid.
func startOrrery(b *testing.B, name string, args ...string) int {
	b.Helper()
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
	return cmd.Process.Pid
}
