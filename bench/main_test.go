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
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/engine/pgcluster"
)

// serverURL is an `orrery serve` started by TestMain against a durable
// PostgreSQL (fsync on, synchronous_commit on) on the same machine;
// cluster is that PostgreSQL, where engine benchmarks make fresh databases.
var (
	serverURL string
	cluster   *pgcluster.Cluster
)

func TestMain(m *testing.M) {
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
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/orrery").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("build: %v\n%s", err, out))
	}
	settings := map[string]string{"max_connections": "300"}
	if os.Getenv("ORRERY_BENCH_STATS") != "" {
		settings["shared_preload_libraries"] = "pg_stat_statements"
	}
	if v := os.Getenv("ORRERY_BENCH_EXPLAIN"); v != "" { // log plans of statements slower than v ms
		settings["shared_preload_libraries"] = "auto_explain"
		settings["auto_explain.log_min_duration"] = v
		settings["auto_explain.log_analyze"] = "on"
		settings["auto_explain.log_buffers"] = "on"
		settings["auto_explain.log_timing"] = "on"
		settings["auto_explain.log_nested_statements"] = "on"
	}
	cluster, err = pgcluster.Start(ctx, pgcluster.Config{Dir: filepath.Join(dir, "pg"), Settings: settings})
	if err != nil {
		return fail(err)
	}
	defer cluster.Stop()
	if out, err := exec.Command(bin, "migrate", "up", "--db", cluster.DSN("")).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("migrate: %v\n%s", err, out))
	}
	addr := freeAddr()
	serve := exec.Command(bin, "serve", "--db", cluster.DSN(""), "--addr", addr, "--log-level", "warn")
	var logs bytes.Buffer
	serve.Stdout, serve.Stderr = &logs, &logs
	if err := serve.Start(); err != nil {
		return fail(err)
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}()
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
	if os.Getenv("ORRERY_BENCH_STATS") != "" {
		conn, err := pgx.Connect(ctx, cluster.DSN(""))
		if err == nil {
			var commits, rollbacks int64
			_ = conn.QueryRow(ctx, "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&commits, &rollbacks)
			fmt.Fprintf(os.Stderr, "bench: database commits %d, rollbacks %d\n", commits, rollbacks)
			printTopStatements(ctx, conn)
			conn.Close(ctx)
		}
	}
	return code
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
func printTopStatements(ctx context.Context, conn *pgx.Conn) {
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		fmt.Fprintln(os.Stderr, "bench: pg_stat_statements:", err)
		return
	}
	rows, err := conn.Query(ctx, `SELECT calls, rows, round(total_exec_time::numeric, 0), round(mean_exec_time::numeric, 3),
		left(regexp_replace(query, '\s+', ' ', 'g'), 110)
		FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25`)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: pg_stat_statements:", err)
		return
	}
	defer rows.Close()
	fmt.Fprintf(os.Stderr, "%9s %9s %9s %8s  %s\n", "calls", "rows", "total ms", "mean ms", "query")
	for rows.Next() {
		var calls, n int64
		var total, mean float64
		var q string
		if err := rows.Scan(&calls, &n, &total, &mean, &q); err == nil {
			fmt.Fprintf(os.Stderr, "%9d %9d %9.0f %8.3f  %s\n", calls, n, total, mean, q)
		}
	}
}
