package executor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/dag"
)

// The attack a job's author could make on a worker: a command step that
// reads another process's environment (/proc/PID/environ: a worker's keys,
// its database URL; here a process started with a secret in it) and the
// worker's files. Without the sandbox it reads both; in the sandbox
// neither exists, nor does any process but the step's own, while the step
// still gets its own env, its payload, a writable /tmp, and the paths the
// worker allows.
func TestSandboxHidesTheWorker(t *testing.T) {
	t.Parallel()
	victim := exec.Command("/bin/sleep", "60")
	victim.Env = []string{"ORRERY_TEST_WORKER_SECRET=worker-s3cret"}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "worker.key")
	if err := os.WriteFile(secretFile, []byte("file-s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(dir, "shared")
	if err := os.MkdirAll(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shared, "input.txt"), []byte("allowed-input\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	attack := `cat /proc/` + strconv.Itoa(victim.Process.Pid) + `/environ 2>/dev/null | tr '\0' '\n' | grep ORRERY_TEST_WORKER_SECRET;
		for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null | tr '\0' '\n' | grep ORRERY_TEST_WORKER_SECRET; done;
		cat ` + secretFile + ` 2>/dev/null; echo done`
	c := cmdCall("/bin/sh", "-c", attack)

	open := (&Runner{Command: &CommandRunner{Allow: []string{"/bin/*"}}}).Run(context.Background(), c)
	if !strings.Contains(open.Output, "worker-s3cret") || !strings.Contains(open.Output, "file-s3cret") {
		t.Fatalf("without the sandbox the attack should read the worker's environ and file (the hole the sandbox closes): %q", open.Output)
	}

	sb, err := NewSandbox([]string{shared}, nil, false, nil)
	if err != nil {
		t.Fatalf("the sandbox (make test installs bubblewrap): %v", err)
	}
	boxed := &Runner{Command: &CommandRunner{Allow: []string{"/bin/*"}, Sandbox: sb}}
	res := boxed.Run(context.Background(), c)
	if !res.OK || strings.Contains(res.Output, "s3cret") || !strings.Contains(res.Output, "done") {
		t.Fatalf("in the sandbox: %+v", res)
	}

	// What the step may still do: its env and payload, /tmp, the allowed
	// path (read-only), and nothing of the worker's processes.
	c = cmdCall("/bin/sh", "-c", `echo "env=$STEP_VAR"; echo "payload=$(cat)"; echo x > /tmp/x && echo tmp=ok;
		cat `+filepath.Join(shared, "input.txt")+`; touch `+filepath.Join(shared, "new")+` 2>/dev/null || echo ro=ok;
		echo procs=$(ls -d /proc/[0-9]* | wc -l)`)
	c.Executor.Command.Env = map[string]string{"STEP_VAR": "mine"}
	c.Payload = []byte(`{"n":1}`)
	res = boxed.Run(context.Background(), c)
	for _, want := range []string{"env=mine", `payload={"n":1}`, "tmp=ok", "allowed-input", "ro=ok"} {
		if !res.OK || !strings.Contains(res.Output, want) {
			t.Fatalf("in the sandbox, want %q: %+v", want, res)
		}
	}
	if n := strings.TrimSpace(res.Output[strings.Index(res.Output, "procs=")+6:]); n == "" || len(n) > 1 {
		t.Fatalf("the sandbox shows %s processes; want a few (its own)", n)
	}

	// A program or working folder outside the sandbox is refused for good.
	c = testCall(dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}, Dir: dir}})
	if res := boxed.Run(context.Background(), c); res.OK || res.Retryable || !strings.Contains(res.Error, "outside this worker's sandbox") {
		t.Fatalf("a dir outside the sandbox: %+v", res)
	}
}

// Without bwrap the sandbox says so (the worker then refuses command
// steps, retryably, naming the fix). No t.Parallel: t.Setenv.
func TestNoSandboxWithoutBwrap(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := NewSandbox(nil, nil, false, nil)
	if !errors.Is(err, ErrNoSandbox) || !strings.Contains(err.Error(), "apt-get install bubblewrap") {
		t.Fatalf("NewSandbox without bwrap: %v", err)
	}
	r := &Runner{Command: &CommandRunner{Allow: []string{"/bin/*"}, Refused: "this worker refuses command steps: " + err.Error()}}
	if res := r.Run(context.Background(), cmdCall("/bin/true")); res.OK || !res.Retryable || !strings.Contains(res.Error, "refuses command steps") {
		t.Fatalf("a refused command step: %+v", res)
	}
	if _, err := NewSandbox([]string{"relative"}, nil, false, nil); err == nil || errors.Is(err, ErrNoSandbox) {
		t.Fatalf("a relative --sandbox-ro: %v", err)
	}
}
