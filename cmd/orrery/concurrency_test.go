package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// Concurrency keys through real processes, across a SIGKILL: a job
// applied from YAML allows 2 runs of one customer at once; 6 triggered
// from the CLI, 4 wait queued naming the key; the serving process is
// killed while they wait and another takes over; all 6 run, and the
// attempts' history never shows more than 2 of the key at once. Another
// customer's run does not wait behind them.
func TestConcurrencyKeysThroughAKill(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	addr := freeAddr(t)
	serve := func() *proc {
		return startProc(t, "serve", "serve", "--db", dsn, "--addr", addr, "--auth", "none", "--shard-ttl", "2s")
	}
	p := serve()
	workerProc(t, dsn, "w1")
	cli := serveCLI(t, addr, &p)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sync.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: sync}
spec:
  schedule: {cron: "0 0 1 1 *"}
  params: {customer: {type: string, default: "42"}}
  concurrency:
    - key: "customer=${{ params.customer }}"
      limit: 2
  steps:
    - name: call
      run: {command: {argv: ["/bin/sleep", "1"]}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cli("apply", "-f", dir)
	idRE := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`)
	var ids []string
	for range 6 {
		ids = append(ids, idRE.FindString(cli("jobs", "trigger", "sync")))
	}
	other := idRE.FindString(cli("jobs", "trigger", "sync", "--param", "customer=7"))
	if out := cli("runs", "get", ids[5]); !strings.Contains(out, "status queued (concurrency key customer=42 2/2)") || !strings.Contains(out, "concurrency keys customer=42") {
		t.Errorf("the sixth run: %s", out)
	}
	p.signal(t, syscall.SIGKILL)
	p = serve()
	poll(t, 20*time.Second, "the new serve answers", func() bool { _, _, code := run(t, "--server", addr, "jobs", "list"); return code == 0 })
	poll(t, 60*time.Second, "all seven runs succeed", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE status = 'succeeded'") == 7
	})
	// The attempts of customer 42, in time: never more than 2 at once.
	most, n := mostAtOnce(t, pool, `SELECT a.started_at, a.finished_at FROM attempts AS a JOIN tasks AS t ON t.id = a.task_id
		WHERE t.run_id = ANY($1::uuid[])`, ids)
	if most > 2 || n != 6 {
		t.Errorf("%d attempts of customer 42 at most at once (limit 2), %d attempts", most, n)
	}
	var otherWaited bool
	if err := pool.QueryRow(t.Context(), "SELECT reason <> '' FROM runs WHERE id = $1", other).Scan(&otherWaited); err != nil || otherWaited {
		t.Errorf("customer 7's run waited (%v)", err)
	}
}

// mostAtOnce reads the attempts query gives (their start and end) and
// returns how many ran at most at once, and how many there were.
func mostAtOnce(t *testing.T, pool *pgxpool.Pool, query string, args ...any) (most, n int) {
	t.Helper()
	rows, err := pool.Query(t.Context(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for rows.Next() {
		var from, to time.Time
		if err := rows.Scan(&from, &to); err != nil {
			t.Fatal(err)
		}
		edges = append(edges, edge{from, 1}, edge{to, -1})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at one instant
	})
	now := 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most, len(edges) / 2
}

// Step keys through real processes and a worker killed inside the
// transaction that ends a holder and releases a held task: a step of two
// jobs applied from YAML shares one key of limit 1; 6 runs triggered from
// the CLI, 5 of their tasks wait held naming the key; the first worker
// dies with its first report uncommitted (its holder's end and the held
// task's release vanish together), the reaper ends the lapsed attempt,
// and a second worker runs them all: the attempts' history never shows
// two of the key at once.
func TestStepKeysThroughAKilledWorker(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	addr := freeAddr(t)
	p := startProc(t, "serve", "serve", "--db", dsn, "--addr", addr, "--auth", "none", "--shard-ttl", "2s")
	w1 := workerProc(t, dsn, "w1", "ORRERY_FAILPOINTS=run/keys-promoted=kill")
	cli := serveCLI(t, addr, &p)
	dir := t.TempDir()
	for _, name := range []string{"export", "report"} {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: `+name+`}
spec:
  schedule: {cron: "0 0 1 1 *"}
  params: {account: {type: string, default: "acme"}}
  overlap: allow
  steps:
    - name: call
      concurrency: [{key: "vendor-${{ params.account }}", limit: 1}]
      retry: {max_attempts: 3, initial: 100ms}
      run: {command: {argv: ["/bin/sleep", "1.5"]}}
`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cli("apply", "-f", dir)
	idRE := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`)
	var ids []string
	for i := range 6 {
		ids = append(ids, idRE.FindString(cli("jobs", "trigger", []string{"export", "report"}[i%2])))
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM tasks WHERE flow_wait = 'vendor-acme' AND status = 'waiting'"); n != 5 {
		t.Fatalf("%d tasks held on the key; want 5 (the first holds it for 1.5 s)\n%s", n, cli("runs", "list"))
	}
	if out := cli("runs", "get", ids[5]); !strings.Contains(out, "concurrency key vendor-acme 1/1") {
		t.Errorf("a held run: %s", out)
	}
	poll(t, 30*time.Second, "w1 ends the first holder and dies before it commits", w1.exited)
	if n := queryInt(t, pool, "SELECT count(*) FROM tasks WHERE flow_wait = 'vendor-acme'"); n != 5 {
		t.Errorf("after the kill, %d tasks held; want 5 (the release died with the end)", n)
	}
	workerProc(t, dsn, "w2")
	poll(t, 90*time.Second, "all six runs succeed", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE status = 'succeeded'") == 6
	})
	most, n := mostAtOnce(t, pool, `SELECT a.started_at, a.finished_at FROM attempts AS a JOIN tasks AS t ON t.id = a.task_id
		WHERE t.run_id = ANY($1::uuid[])`, ids)
	if most > 1 || n < 6 {
		t.Errorf("%d attempts of the key at most at once (limit 1), %d attempts", most, n)
	}
}

// A step's rate limit through a node killed inside its admission
// transaction, after it spent the key's tokens and lined up the rest:
// nothing of the pass is left (no bucket, no place in line, nothing
// admitted); another node admits the six tasks of the key as its bucket
// allows (2 at once, then one every 2 s), by the times their River jobs
// were written, and the run succeeds.
func TestRateLimitThroughAKilledAdmitter(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	ctx := context.Background()
	n1 := startProcEnv(t, "node-1", []string{"ORRERY_FAILPOINTS=dispatch/admitted=kill@1"},
		"serve", "--db", dsn, "--addr", "127.0.0.1:0", "--node-name", "node-1", "--shard-ttl", "2s", "--log-level", "info")
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	const per, limit = 4 * time.Second, 2
	spec := dag.JobSpec{Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)}}
	for i := range 6 {
		spec.Steps = append(spec.Steps, dag.Step{Name: fmt.Sprintf("s%d", i),
			RateLimit: &dag.RateLimit{Key: "vendor", Limit: limit, Per: dag.Duration{Duration: per}},
			Run:       dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}})
	}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "rated"}, Spec: spec}, ""); err != nil {
		t.Fatal(err)
	}
	poll(t, 20*time.Second, "the run's tasks are released", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM tasks WHERE status = 'queued' AND rate_key = 'vendor'") == 6
	})
	if _, err := pool.Exec(ctx, `INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at)
		VALUES (gen_random_uuid(), 'ad', '{"default": 10}', now(), now(), now() + interval '3 seconds')`); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "node-1 dies inside its admission transaction", n1.exited)
	for what, sql := range map[string]string{
		"buckets":             "SELECT count(*) FROM rate_buckets",
		"tasks given a place": "SELECT count(*) FROM tasks WHERE rate_at IS NOT NULL",
		"tasks admitted":      "SELECT count(*) FROM tasks WHERE admitted_at IS NOT NULL",
		"River jobs":          "SELECT count(*) FROM river_job",
	} {
		if n := queryInt(t, pool, sql); n != 0 {
			t.Errorf("%d %s by a transaction that never committed", n, what)
		}
	}
	startNodeProc(t, dsn, "node-2")
	workerProc(t, dsn, "w2")
	poll(t, 60*time.Second, "the run succeeds", func() bool { return runStatus(t, pool, "rated", "succeeded") })
	// When each spent its token (rate_at, once admitted: the instant of
	// the pass that decided it).
	rows, err := pool.Query(ctx, `SELECT rate_at FROM tasks WHERE rate_key = 'vendor' ORDER BY rate_at`)
	if err != nil {
		t.Fatal(err)
	}
	ats, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil || len(ats) != 6 {
		t.Fatalf("%d admissions (%v); want 6", len(ats), err)
	}
	interval := per / limit
	for i := range ats {
		for j := i + 1; j < len(ats); j++ {
			if n, most := j-i+1, limit+int((ats[j].Sub(ats[i])+time.Millisecond)/interval); n > most {
				t.Errorf("%d admissions of the key in %v; its bucket allows %d (all: %v)", n, ats[j].Sub(ats[i]), most, ats)
			}
		}
	}
	t.Logf("six admissions over %v (2 at once, then one every 2 s: at least 8 s)", ats[5].Sub(ats[0]).Round(time.Millisecond))
}

// A debounced run survives a kill inside the transaction that starts it:
// serve, its scheduler SIGKILLed by a failpoint once it decided the run
// (scheduler/debounce-tx), leaves the run queued and due, nothing of its
// start written; a new serve starts it once, with the last trigger's
// params, and a trigger after it makes a new run.
func TestDebounceThroughAKilledScheduler(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	addr := freeAddr(t)
	p := startProcEnv(t, "serve-1", []string{"ORRERY_FAILPOINTS=scheduler/debounce-tx=kill@1"},
		"serve", "--db", dsn, "--addr", addr, "--auth", "none", "--shard-ttl", "2s")
	workerProc(t, dsn, "w1")
	cli := serveCLI(t, addr, &p)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "deploy.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: deploy}
spec:
  schedule: {cron: "0 0 1 1 *"}
  params: {repo: {type: string}, sha: {type: string}}
  debounce: {key: "${{ params.repo }}", period: 1s}
  steps:
    - name: ship
      run: {command: {argv: ["/bin/echo", "${{ params.sha }}"]}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cli("apply", "-f", dir)
	idRE := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`)
	var id string
	for _, sha := range []string{"a1", "b2", "c3"} {
		got := idRE.FindString(cli("jobs", "trigger", "deploy", "--param", "repo=web", "--param", "sha="+sha))
		if id != "" && got != id {
			t.Fatalf("a trigger of a debounced key made run %s, not %s", got, id)
		}
		id = got
	}
	if out := cli("runs", "get", id); !strings.Contains(out, "debounce key web: 3 triggers, starts at ") {
		t.Errorf("runs get of the debounced run:\n%s", out)
	}
	poll(t, 30*time.Second, "serve-1 dies inside the debounce's transaction", p.exited)
	if s := queryString(t, pool, "SELECT status || ' ' || debouncing::text FROM runs WHERE id = $1", id); s != "queued true" {
		t.Errorf("the debounced run after the kill: %s, want queued and due", s)
	}
	for what, sql := range map[string]string{
		"tasks released": "SELECT count(*) FROM tasks WHERE released_at IS NOT NULL",
		"River jobs":     "SELECT count(*) FROM river_job",
	} {
		if n := queryInt(t, pool, sql); n != 0 {
			t.Errorf("%d %s by a transaction that never committed", n, what)
		}
	}
	p = startProc(t, "serve-2", "serve", "--db", dsn, "--addr", addr, "--auth", "none", "--shard-ttl", "2s")
	poll(t, 60*time.Second, "the debounced run succeeds", func() bool { return runStatus(t, pool, "deploy", "succeeded") })
	if n := queryInt(t, pool, "SELECT count(*) FROM runs"); n != 1 {
		t.Errorf("%d runs, want the one debounced run", n)
	}
	if out := queryString(t, pool, "SELECT params->>'sha' FROM runs WHERE id = $1", id); out != "c3" {
		t.Errorf("the run ran with sha %q, want the last trigger's", out)
	}
	if again := idRE.FindString(cli("jobs", "trigger", "deploy", "--param", "repo=web", "--param", "sha=d4")); again == id {
		t.Errorf("a trigger after the run started joined it")
	}
}

// serveCLI waits for the serve at addr to answer, and returns the CLI
// against it, which ends the test on an error, with the logs of *p (the
// serve running then).
func serveCLI(t *testing.T, addr string, p **proc) func(args ...string) string {
	t.Helper()
	poll(t, 20*time.Second, "serve answers", func() bool { _, _, code := run(t, "--server", addr, "jobs", "list"); return code == 0 })
	return func(args ...string) string {
		t.Helper()
		out, errOut, code := run(t, append([]string{"--server", addr}, args...)...)
		if code != 0 {
			t.Fatalf("orrery %v: %s %s\n%s", args, out, errOut, (*p).Logs())
		}
		return out
	}
}
