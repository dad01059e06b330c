package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
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
	admin, _, code := run(t, "keys", "create", "--db", dsn, "--principal", "ops", "--role", "admin")
	if code != 0 {
		t.Fatal("keys create --role admin failed")
	}
	workerKey, errOut, code := run(t, "keys", "create", "--db", dsn, "--principal", "py", "--role", "worker", "--type", "invoice")
	if code != 0 || !strings.Contains(errOut, "worker, types invoice") {
		t.Fatalf("keys create --role worker: exit %d %q", code, errOut)
	}
	addr := freeAddr(t)
	p := startProc(t, "serve", "serve", "--db", dsn, "--addr", addr, "--auth", "keys", "--shard-ttl", "2s", "--lease-ttl", "3s", "--log-level", "info")
	as := func(args ...string) (string, string, int) {
		t.Helper()
		return run(t, append([]string{"--server", addr, "--api-key", strings.TrimSpace(admin)}, args...)...)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, code := as("jobs", "list"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", p.Logs())
		}
	}
	file := filepath.Join(t.TempDir(), "py.yaml")
	if err := os.WriteFile(file, []byte(pyInvoiceJob), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := as("apply", "-f", file); code != 0 {
		t.Fatalf("apply: exit %d %q %q", code, out, errOut)
	}
	return addr, as, strings.TrimSpace(workerKey)
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
		return queryInt(t, pool, `SELECT count(*) FROM attempts a JOIN tasks k ON k.id = a.task_id
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
			WHERE k.run_id = $1 AND a.worker LIKE 'py2 (%' AND a.exit_reason = 'lease_expired' AND a.late_outcome = 'succeeded'`, stalled) == 1
	})
	if !strings.Contains(py2.Logs(), "refused") {
		t.Fatalf("py2 did not say its report was refused:\n%s", py2.Logs())
	}
}
