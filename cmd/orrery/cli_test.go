package main_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// These tests build the real binary and drive it as a user would: `orrery
// dev` as a child process with its own PostgreSQL, then the client verbs.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "orrery-cli-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "orrery")
	// No test reads or writes the user's own `orrery login`.
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	stopPG, err := pgtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		os.Exit(1)
	}
	code := m.Run()
	stopPG()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// run runs the binary with args and returns stdout, stderr and the exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runEnv(t, nil, args...)
}

// runEnv is run with extra environment variables.
func runEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// startDev runs `orrery dev` until the API answers, and returns a stop
// function that sends Ctrl-C and waits for a clean exit.
func startDev(t *testing.T, dataDir, addr string) (stop func()) {
	t.Helper()
	cmd := exec.Command(binary, "dev", "--addr", addr)
	cmd.Env = append(os.Environ(), "ORRERY_DATA_DIR="+dataDir)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		// The CLI finds the admin key dev wrote in its data dir.
		if _, _, code := runEnv(t, []string{"ORRERY_DATA_DIR=" + dataDir}, "--server", addr, "jobs", "list"); code == 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("orrery dev exited (%v):\n%s", err, logs.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("orrery dev did not serve within 90s:\n%s", logs.String())
		}
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("orrery dev exited with %v after Ctrl-C:\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("orrery dev did not stop within 30s of Ctrl-C")
		}
	}
}

// startServe runs `orrery serve --no-scheduler --auth none` on dsn until
// t ends and returns its address once the API answers, and the process
// (its logs). These tests are about the CLI; authentication has its own.
func startServe(t *testing.T, dsn string) (string, *proc) {
	t.Helper()
	addr := freeAddr(t)
	p := startProc(t, "serve", "serve", "--db", dsn, "--addr", addr, "--no-scheduler", "--auth", "none")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, code := run(t, "--server", addr, "jobs", "list"); code == 0 {
			return addr, p
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", p.Logs())
		}
	}
}

// reachableDir is a temporary folder that the postgres user can enter
// (t.TempDir's are private to root).
func reachableDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "orrery-dev-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestDevServesExamplesAndClientVerbs(t *testing.T) {
	dataDir := filepath.Join(reachableDir(t), "data")
	addr := freeAddr(t)
	stop := startDev(t, dataDir, addr)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runEnv(t, []string{"ORRERY_DATA_DIR=" + dataDir}, append([]string{"--server", addr}, args...)...)
	}
	// Without a key every call is refused; with dev's key (found in its
	// data dir, as from the project folder) the verbs work.
	if _, errOut, code := run(t, "--server", addr, "jobs", "list"); code != 1 || !strings.Contains(errOut, "unauthenticated") {
		t.Fatalf("jobs list without a key: %d %s", code, errOut)
	}

	// Nor the address: a client command of the folder without --server
	// asks the one dev serves on (not 127.0.0.1:8080).
	out, errOut, code := runEnv(t, []string{"ORRERY_DATA_DIR=" + dataDir, "XDG_CONFIG_HOME=" + t.TempDir()}, "jobs", "list")
	if code != 0 || !strings.Contains(out, "nightly-sales") {
		t.Fatalf("jobs list without --server from dev's folder: %d %s %s", code, out, errOut)
	}
	out, _, _ = cli("jobs", "list")
	for _, name := range []string{"nightly-sales", "hourly-sync", "publish-reports"} {
		if !strings.Contains(out, name) {
			t.Errorf("jobs list lacks example %s:\n%s", name, out)
		}
	}

	jobFile := filepath.Join(t.TempDir(), "job.yaml")
	os.WriteFile(jobFile, []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: cli-job, namespace: team-a}
spec:
  schedule: {cron: "30 2 * * *", timezone: America/New_York}
  run: {handler: noop}
`), 0o644)
	if out, errOut, code := cli("jobs", "create", "-f", jobFile); code != 0 || !strings.Contains(out, "job team-a/cli-job created") {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := cli("jobs", "create", "-f", jobFile); code == 0 || !strings.Contains(errOut, "already_exists") {
		t.Fatalf("duplicate create: %d %s", code, errOut)
	}
	out, _, code = cli("jobs", "get", "cli-job", "-n", "team-a")
	if code != 0 || !strings.Contains(out, "next_fire_times:") || !strings.Contains(out, "status: active") {
		t.Fatalf("get: %s", out)
	}
	for _, verb := range []string{"pause", "resume", "delete"} {
		if out, errOut, code := cli("jobs", verb, "cli-job", "-n", "team-a"); code != 0 {
			t.Fatalf("%s: %s %s", verb, out, errOut)
		}
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: bad}\nspec:\n  schedule: {cron: \"61 * * * *\"}\n  run: {handler: noop}\n  colour: blue\n"), 0o644)
	_, errOut, code = cli("jobs", "create", "-f", bad)
	if code == 0 || !strings.Contains(errOut, bad+":7:3: spec.colour: unknown field") {
		t.Fatalf("bad file: %d %s", code, errOut)
	}

	out, errOut, code = cli("schedule", "preview", "--cron", "30 2 * * *", "--tz", "America/New_York", "--from", "2026-03-07T12:00:00Z", "-n", "3")
	if code != 0 || out != "2026-03-08T07:00:00Z\n2026-03-09T06:30:00Z\n2026-03-10T06:30:00Z\n" {
		t.Fatalf("preview: %d %q %s", code, out, errOut)
	}
	out, errOut, code = cli("schedule", "preview", "--cron", "61 * * * *")
	if code == 0 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "minute field") {
		t.Fatalf("bad preview: %d %q %q", code, out, errOut)
	}
	out, _, code = cli("schedule", "preview", "--at", "2026-12-31T23:59:59+01:00")
	if code != 0 || out != "2026-12-31T22:59:59Z\n" {
		t.Fatalf("preview --at: %d %q", code, out)
	}
	stop()

	// A second run reuses the data: the examples are unchanged, the deleted job is still on record.
	stop = startDev(t, dataDir, addr)
	defer stop()
	out, _, _ = cli("jobs", "list", "--status", "deleted")
	if !strings.Contains(out, "cli-job") {
		t.Fatalf("second run lost the data:\n%s", out)
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: a}\nspec:\n  schedule: {cron: \"* * * *\"}\n  run: {handler: h}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: B}\nspec:\n  schedule: {cron: \"@daily\", timezone: Mars/Base}\n  run: {handler: h}\n"), 0o644)
	_, errOut, code := run(t, "validate", "-f", dir)
	if code == 0 || !strings.Contains(errOut, "a.yaml:5:14: spec.schedule.cron") || !strings.Contains(errOut, "b.yaml:3:12: metadata.name") || !strings.Contains(errOut, "b.yaml:5:30: spec.schedule.timezone") {
		t.Fatalf("validate: %d\n%s", code, errOut)
	}
	out, _, code := run(t, "validate", "-f", "../../examples")
	if code != 0 || !strings.Contains(out, "15 job(s) in 15 file(s) are valid") {
		t.Fatalf("examples: %d %s", code, out)
	}
}

// apply from a git checkout: plan, apply, idempotence, --dry-run, --prune,
// and the source (path and commit) on the job.
func TestApplyFolder(t *testing.T) {
	dsn := pgtest.DSN(t)
	addr, _ := startServe(t, dsn)
	repo := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.email=ci@example.invalid", "-c", "user.name=ci"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	jobYAML := func(name, cron string) string {
		return fmt.Sprintf("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: %s}\nspec:\n  schedule: {cron: %q}\n  run: {handler: noop}\n", name, cron)
	}
	os.MkdirAll(filepath.Join(repo, "jobs"), 0o755)
	os.WriteFile(filepath.Join(repo, "jobs", "a.yaml"), []byte(jobYAML("a", "@daily")+"---\n"+jobYAML("b", "@hourly")), 0o644)
	git("add", ".")
	git("commit", "-qm", "jobs")

	apply := func(args ...string) string {
		t.Helper()
		out, errOut, code := run(t, append([]string{"--server", addr, "apply", "-f", repo, "-n", "team"}, args...)...)
		if code != 0 {
			t.Fatalf("apply %v: %s %s", args, out, errOut)
		}
		return out
	}
	if out := apply("--dry-run"); !strings.Contains(out, "+ create team/a\n+ create team/b\n") || !strings.Contains(out, "dry run") {
		t.Fatalf("dry run:\n%s", out)
	}
	if out := apply(); !strings.Contains(out, "Applied: 2 created") {
		t.Fatalf("apply:\n%s", out)
	}
	if out := apply(); !strings.Contains(out, "= unchanged team/a") || !strings.Contains(out, "No changes: 2 job(s) unchanged.") {
		t.Fatalf("second apply:\n%s", out)
	}
	out, _, _ := run(t, "--server", addr, "jobs", "get", "a", "-n", "team")
	if !strings.Contains(out, "source: jobs/a.yaml ") {
		t.Fatalf("source not shown:\n%s", out)
	}
	os.WriteFile(filepath.Join(repo, "jobs", "a.yaml"), []byte(jobYAML("a", "@weekly")), 0o644)
	if out := apply("--prune"); !strings.Contains(out, "~ update team/a: spec.schedule\n- delete team/b\n") || !strings.Contains(out, "1 updated, 1 deleted") {
		t.Fatalf("prune:\n%s", out)
	}
	os.WriteFile(filepath.Join(repo, "jobs", "bad.yaml"), []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: c, namespace: other}\nspec:\n  schedule: {cron: \"@daily\"}\n  run: {handler: noop}\n"), 0o644)
	if _, errOut, code := run(t, "--server", addr, "apply", "-f", repo, "-n", "team"); code == 0 || !strings.Contains(errOut, "bad.yaml:3:") {
		t.Fatalf("namespace mismatch: %d %s", code, errOut)
	}
}

// `orrery dev`, which new users run first, is no way to become its system
// admin or its database's superuser: a command step (any editor's code)
// runs as nobody and reads neither the admin key nor the database's
// password, and the database refuses TCP logins without that password.
func TestDevStackIsLocked(t *testing.T) {
	dataDir := filepath.Join(reachableDir(t), "data")
	addr := freeAddr(t)
	stop := startDev(t, dataDir, addr)
	defer stop()
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := runEnv(t, []string{"ORRERY_DATA_DIR=" + dataDir}, append([]string{"--server", addr}, args...)...)
		if code != 0 {
			t.Fatalf("orrery %v: %s %s", args, out, errOut)
		}
		return out
	}
	pid, err := os.ReadFile(filepath.Join(dataDir, "pg", "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	port := strings.Split(string(pid), "\n")[3]
	password, err := os.ReadFile(filepath.Join(dataDir, "pg", "password"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(filepath.Join(dataDir, "pg", "password")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the password file: %v %v, want mode 0600", info.Mode(), err)
	}
	if info, err := os.Stat(filepath.Join(dataDir, "api-key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the key file: %v %v, want mode 0600", info.Mode(), err)
	}
	ctx := context.Background()
	if conn, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:"+port+"/orrery?sslmode=disable"); err == nil {
		conn.Close(ctx)
		t.Fatal("dev's PostgreSQL let in a TCP login without its password")
	}
	pool := openPool(t, "postgres://postgres:"+strings.TrimSpace(string(password))+"@127.0.0.1:"+port+"/orrery?sslmode=disable")

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "probe.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: probe, namespace: probe}
spec:
  schedule: {cron: "@yearly"}
  defaults: {retry: {max_attempts: 1}}
  run: {command: {argv: [/bin/sh, -c, 'echo uid=$(id -u); cat `+dataDir+`/api-key || echo key-refused; cat `+dataDir+`/pg/password || echo password-refused']}}
`), 0o644)
	cli("apply", "-f", dir)
	cli("jobs", "trigger", "probe", "-n", "probe")
	poll(t, 60*time.Second, "the probe's run succeeds", func() bool { return runStatus(t, pool, "probe", "succeeded") })
	var output string
	if err := pool.QueryRow(ctx, `SELECT a.output FROM attempts a JOIN tasks k ON k.id = a.task_id JOIN runs r ON r.id = k.run_id
		JOIN jobs j ON j.id = r.job_id WHERE j.name = 'probe'`).Scan(&output); err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(filepath.Join(dataDir, "api-key"))
	if strings.Contains(output, strings.TrimSpace(string(key))) || strings.Contains(output, strings.TrimSpace(string(password))) ||
		!strings.Contains(output, "key-refused") || !strings.Contains(output, "password-refused") {
		t.Errorf("the step's output %q: want neither the key nor the password", output)
	}
	if os.Geteuid() == 0 {
		nobody, err := user.Lookup("nobody")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(output, "uid="+nobody.Uid+"\n") {
			t.Errorf("the step's output %q: want it run as nobody (uid %s)", output, nobody.Uid)
		}
	}
}
