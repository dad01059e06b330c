package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// pyInvoiceJob is a job of one remote step of type invoice: the example
// Python worker's. Its first attempt sleeps params.seconds.
const pyInvoiceJob = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: py-invoice, namespace: billing}
spec:
  schedule: {at: "2099-01-01T00:00:00Z"}
  overlap: allow
  params:
    region: {type: string, default: eu}
    seconds: {type: integer, default: 0}
  steps:
    - name: invoice
      run: {worker: invoice}
      payload: {customer: 7, region: "${{ params.region }}", seconds: "${{ attempt == 1 ? params.seconds : 0 }}"}
      retry: {max_attempts: 3, initial: 1s, max: 1s}
`

// remoteStack serves the API with keys (and a scheduler node, whose reaper
// expires remote leases) on dsn, applies pyInvoiceJob, and returns the
// server's address, the admin's CLI and a worker key for type invoice.
func remoteStack(t *testing.T, dsn string) (string, func(args ...string) (string, string, int), string) {
	t.Helper()
	admin, workerKey := remoteKeys(t, dsn)
	addr, as, _ := serveRemote(t, dsn, "serve", admin)
	applyPyInvoice(t, as)
	return addr, as, workerKey
}

// applyPyInvoice applies pyInvoiceJob through as (an admin's CLI).
func applyPyInvoice(t *testing.T, as func(args ...string) (string, string, int)) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "py.yaml")
	if err := os.WriteFile(file, []byte(pyInvoiceJob), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := as("apply", "-f", file); code != 0 {
		t.Fatalf("apply: exit %d %q %q", code, out, errOut)
	}
}

// remoteKeys makes an admin key and a worker key (type invoice) on dsn.
func remoteKeys(t *testing.T, dsn string) (admin, workerKey string) {
	t.Helper()
	admin, _, code := run(t, "keys", "create", "--db", dsn, "--principal", "ops", "--role", "admin")
	if code != 0 {
		t.Fatal("keys create --role admin failed")
	}
	workerKey, errOut, code := run(t, "keys", "create", "--db", dsn, "--principal", "py", "--role", "worker", "--type", "invoice")
	if code != 0 || !strings.Contains(errOut, "worker, types invoice") {
		t.Fatalf("keys create --role worker: exit %d %q", code, errOut)
	}
	return strings.TrimSpace(admin), strings.TrimSpace(workerKey)
}

// serveRemote runs `orrery serve` (API, gateway, scheduler node) on dsn
// with env, and returns its address and the admin's CLI against it once
// it answers.
func serveRemote(t *testing.T, dsn, name, admin string, env ...string) (string, func(args ...string) (string, string, int), *proc) {
	t.Helper()
	addr := freeAddr(t)
	p := startProcEnv(t, name, env, "serve", "--db", dsn, "--addr", addr, "--auth", "keys", "--node-name", name, "--shard-ttl", "2s",
		"--lease-ttl", "3s", "--log-level", "info")
	as := func(args ...string) (string, string, int) {
		t.Helper()
		return run(t, append([]string{"--server", addr, "--api-key", admin}, args...)...)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, code := as("jobs", "list"); code == 0 {
			return addr, as, p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start:\n%s", name, p.Logs())
		}
	}
}

// startPython runs the example Python worker (a real python3) as name.
func startPython(t *testing.T, name, addr, key string) *proc {
	t.Helper()
	cmd := exec.Command("python3", filepath.Join("..", "..", "examples", "workers", "python", "example.py"))
	cmd.Env = append(os.Environ(), "ORRERY_URL=http://"+addr, "ORRERY_KEY="+key, "ORRERY_WORKER_NAME="+name, "ORRERY_LEASE_SECONDS=5",
		"PYTHONUNBUFFERED=1")
	return startCmd(t, name, cmd)
}

// The example Python worker runs a remote step; SIGKILLed mid-task, its
// attempt is retried on another worker once its lease lapses; SIGSTOPped
// past its lease and resumed, its late report is refused and recorded,
// and the step ran once more elsewhere.
func TestPythonWorker(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed (Debian: apt-get install python3)")
	}
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	addr, as, key := remoteStack(t, dsn)
	trigger := func(params ...string) string {
		t.Helper()
		args := []string{"jobs", "trigger", "py-invoice", "-n", "billing"}
		for _, p := range params {
			args = append(args, "--param", p)
		}
		out, errOut, code := as(args...)
		if code != 0 {
			t.Fatalf("trigger: exit %d %q", code, errOut)
		}
		f := strings.Fields(out) // run ID STATUS
		if len(f) < 2 || f[0] != "run" {
			t.Fatalf("trigger answered %q", out)
		}
		return f[1]
	}
	status := func(runID string) string {
		var s string
		if err := pool.QueryRow(t.Context(), `SELECT status FROM runs WHERE id = $1`, runID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	runningOn := func(runID, worker string) bool {
		return queryInt(t, pool, `SELECT count(*) FROM every_attempt a JOIN tasks k ON k.id = a.task_id
			WHERE k.run_id = $1 AND a.worker LIKE $2 AND a.outcome = 'running'`, runID, worker+" (%") == 1
	}

	py1 := startPython(t, "py1", addr, key)
	first := trigger("region=us")
	poll(t, 30*time.Second, "py1 runs the first run", func() bool { return status(first) == "succeeded" })
	var output string
	if err := pool.QueryRow(t.Context(), `SELECT a.output FROM attempts a JOIN tasks k ON k.id = a.task_id WHERE k.run_id = $1`, first).Scan(&output); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(output, `"invoice": "INV-7-`) || !strings.Contains(output, `"region": "us"`) || !strings.Contains(output, first+"/invoice/1") {
		t.Fatalf("output %q", output)
	}

	// SIGKILL mid-task: the attempt is retried elsewhere after its lease.
	killed := trigger("seconds=60")
	poll(t, 30*time.Second, "py1 runs the killed run", func() bool { return runningOn(killed, "py1") })
	py1.signal(t, syscall.SIGKILL)
	py2 := startPython(t, "py2", addr, key)
	poll(t, 40*time.Second, "the killed attempt retries on py2 and succeeds", func() bool { return status(killed) == "succeeded" })
	if n := queryInt(t, pool, `SELECT count(*) FROM attempts a JOIN tasks k ON k.id = a.task_id
		WHERE k.run_id = $1 AND a.exit_reason = 'lease_expired' AND a.worker LIKE 'py1 (%'`, killed); n != 1 {
		t.Fatalf("%d lease_expired attempts of py1 in the killed run, want 1", n)
	}

	// SIGSTOP past the lease, then SIGCONT: the late report is refused and
	// recorded; the step ran again on py3.
	stalled := trigger("seconds=3")
	poll(t, 30*time.Second, "py2 runs the stalled run", func() bool { return runningOn(stalled, "py2") })
	py2.signal(t, syscall.SIGSTOP)
	startPython(t, "py3", addr, key)
	poll(t, 40*time.Second, "the stalled attempt retries on py3 and succeeds", func() bool { return status(stalled) == "succeeded" })
	py2.signal(t, syscall.SIGCONT)
	poll(t, 30*time.Second, "py2's late report is recorded on its attempt", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM attempts a JOIN tasks k ON k.id = a.task_id
			WHERE k.run_id = $1 AND a.worker LIKE 'py2 (%' AND a.exit_reason = 'lease_expired' AND a.late_at IS NOT NULL`, stalled) == 1
	})
	// The server records the late report before it answers it: py2 says so
	// once the answer reaches it.
	poll(t, 30*time.Second, "py2 says its report was refused", func() bool { return strings.Contains(py2.Logs(), "refused") })
}

// An API node SIGKILLed while it holds a remote task: right after its
// gateway fetched the task's River job (before the offer), the job is
// delivered again once the node's lease lapses and another node offers
// it; right after a claim committed (before its answer reached the
// worker), the attempt no worker knows lapses with its own lease and runs
// again. Either way the step runs once to success, on the worker of the
// node left.
func TestAPINodeKilledHoldingARemoteTask(t *testing.T) {
	for _, fp := range []string{"gateway/handed-off", "gateway/claimed"} {
		t.Run(strings.ReplaceAll(fp, "/", "-"), func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.DSN(t)
			pool := openPool(t, dsn)
			admin, key := remoteKeys(t, dsn)
			addr1, as1, api1 := serveRemote(t, dsn, "api1", admin, "ORRERY_FAILPOINTS="+fp+"=kill")
			applyPyInvoice(t, as1)
			startPython(t, "py1", addr1, key)
			poll(t, 20*time.Second, "py1 registers its slots", func() bool {
				return queryInt(t, pool, `SELECT count(*) FROM workers WHERE name LIKE 'py1 (%' AND lease_expires_at > now()`) == 1
			})
			// At gateway/handed-off, api1 may die before the trigger's answer
			// is written (its gateway fetches as soon as the trigger
			// commits): the run is there all the same.
			if _, errOut, code := as1("jobs", "trigger", "py-invoice", "-n", "billing"); code != 0 && !strings.Contains(errOut, "cannot reach") {
				t.Fatalf("trigger: exit %d %q", code, errOut)
			}
			poll(t, 20*time.Second, "api1 dies at "+fp, api1.exited)
			if n := queryInt(t, pool, `SELECT count(*) FROM runs`); n != 1 {
				t.Fatalf("%d runs after the trigger, want 1", n)
			}
			addr2, _, _ := serveRemote(t, dsn, "api2", admin)
			startPython(t, "py2", addr2, key)
			poll(t, 40*time.Second, "the run succeeds on py2", func() bool {
				return queryInt(t, pool, `SELECT count(*) FROM runs WHERE status = 'succeeded'`) == 1
			})
			got := attemptsOf(t, pool, "py-invoice")
			want := "py2"
			if fp == "gateway/claimed" { // the claim committed: its attempt lapsed first
				want = "py1 lease_expired, py2"
			}
			t.Logf("attempts %v", got)
			if n := queryInt(t, pool, `SELECT count(*) FROM attempts WHERE outcome = 'succeeded' AND worker LIKE 'py2 (%'`); n != 1 {
				t.Fatalf("attempts %v: want %s", got, want)
			}
			if n := queryInt(t, pool, `SELECT count(*) FROM attempts`); fp == "gateway/handed-off" && n != 1 || fp == "gateway/claimed" && n != 2 {
				t.Fatalf("attempts %v: want %s", got, want)
			}
			if n := queryInt(t, pool, `SELECT count(*) FROM attempts WHERE exit_reason = 'lease_expired' AND worker LIKE 'py1 (%'`); fp == "gateway/claimed" && n != 1 {
				t.Fatalf("attempts %v: want %s", got, want)
			}
		})
	}
}

// Remote workers in the chaos: two API nodes, three Python workers, runs
// triggered on both nodes while a worker is SIGKILLed and replaced, another
// SIGSTOPped past its lease and resumed, and an API node SIGKILLed. Every
// run ends succeeded (the reference: the step cannot fail), each task with
// exactly one succeeded attempt, and the stalled worker's late reports, if
// any, were refused.
func TestRemoteWorkersUnderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test")
	}
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	admin, key := remoteKeys(t, dsn)
	addr1, as1, api1 := serveRemote(t, dsn, "api1", admin)
	addr2, as2, _ := serveRemote(t, dsn, "api2", admin)
	applyPyInvoice(t, as1)
	pyA := startPython(t, "pyA", addr1, key)
	pyB := startPython(t, "pyB", addr2, key)
	startPython(t, "pyC", addr2, key)
	const runs = 40
	for i := range runs {
		as := as2
		if i < 10 { // api1 dies after these
			as = as1
		}
		if _, errOut, code := as("jobs", "trigger", "py-invoice", "-n", "billing", "--param", "seconds="+strconv.Itoa(i%3)); code != 0 {
			t.Fatalf("trigger %d: exit %d %q", i, code, errOut)
		}
		switch i {
		case 8:
			pyA.signal(t, syscall.SIGKILL)
			startPython(t, "pyD", addr2, key)
		case 10:
			api1.signal(t, syscall.SIGKILL)
		case 15:
			pyB.signal(t, syscall.SIGSTOP)
		case 35:
			pyB.signal(t, syscall.SIGCONT)
		}
		time.Sleep(300 * time.Millisecond)
	}
	poll(t, 120*time.Second, "every run succeeds", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM runs WHERE status = 'succeeded'`) == runs
	})
	if n := queryInt(t, pool, `SELECT count(*) FROM tasks t WHERE (SELECT count(*) FROM attempts a WHERE a.task_id = t.id AND a.outcome = 'succeeded') <> 1`); n != 0 {
		t.Fatalf("%d tasks without exactly one succeeded attempt", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM attempts WHERE late_at IS NOT NULL AND outcome = 'succeeded'`); n != 0 {
		t.Fatalf("%d late reports over a succeeded attempt", n)
	}
	t.Logf("attempts by outcome and exit reason: %d lease_expired, %d late reports refused",
		queryInt(t, pool, `SELECT count(*) FROM attempts WHERE exit_reason = 'lease_expired'`),
		queryInt(t, pool, `SELECT count(*) FROM attempts WHERE late_at IS NOT NULL`))
}
