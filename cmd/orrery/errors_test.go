package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// oneLineError checks that a client verb failed as a user should see it:
// exit 1, nothing on stdout, one line on stderr that says orrery: and want,
// and no trace of a panic.
func oneLineError(t *testing.T, args []string, stdout, stderr string, code int, want string) {
	t.Helper()
	if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "orrery: ") ||
		!strings.Contains(stderr, want) || strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine") {
		t.Errorf("orrery %s: exit %d\nstdout %q\nstderr %q\nwant exit 1 and one line naming %q", strings.Join(args, " "), code, stdout, stderr, want)
	}
}

// Every client verb, against a server that is not there, prints one line
// and exits 1; none crashes (jobs pause|resume|delete used to segfault).
func TestClientVerbsWithoutAServer(t *testing.T) {
	addr := freeAddr(t) // nothing listens there once freeAddr returns
	dir := t.TempDir()
	job := filepath.Join(dir, "job.yaml")
	os.WriteFile(job, []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  schedule: {cron: \"@daily\"}\n  run: {handler: h}\n"), 0o644)
	id := "0190c0b4-0000-7000-8000-000000000000"
	for _, verb := range [][]string{
		{"jobs", "create", "-f", job}, {"jobs", "get", "j"}, {"jobs", "list"},
		{"jobs", "pause", "j"}, {"jobs", "resume", "j"}, {"jobs", "delete", "j"}, {"jobs", "pause", id},
		{"jobs", "trigger", "j"},
		{"runs", "list"}, {"runs", "list", "--job", "j"}, {"runs", "get", id}, {"runs", "cancel", id},
		{"dlq", "list"}, {"dlq", "replay", "--all"}, {"dlq", "replay", id},
		{"cluster"},
		{"apply", "-f", dir}, {"apply", "-f", dir, "--dry-run"},
		{"schedule", "preview", "--cron", "@daily"}, {"schedule", "preview", "--at", "2030-01-01T00:00:00Z"},
		{"keys", "list"}, {"keys", "revoke", "ork_abcdefgh"}, {"keys", "create", "--principal", "p", "--role", "reader"},
		{"tenants", "list"}, {"tenants", "create", "t"},
		{"grants", "list"}, {"grants", "create", "p", "reader", "-n", "ns"}, {"grants", "revoke", "p", "-n", "ns"},
	} {
		args := append([]string{"--server", addr}, verb...)
		out, errOut, code := run(t, args...)
		oneLineError(t, args, out, errOut, code, "cannot reach the Orrery server")
	}
}

// With a server up, every error it answers (not found, invalid argument,
// failed precondition) is one line and exit 1, and the rejected calls
// write nothing. Zero times and cron expressions that never fire are
// refused before anything is sent, with file:line:col.
func TestClientVerbsOnServerErrors(t *testing.T) {
	dsn := pgtest.DSN(t)
	addr, serve := startServe(t, dsn)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM audit_log) + (SELECT count(*) FROM job_versions)
			+ (SELECT count(*) FROM runs) + (SELECT count(*) FROM namespaces) + (SELECT count(*) FROM idempotency_keys)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	dir := t.TempDir()
	write := func(name, schedule, payload string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: gone}\nspec:\n  schedule: "+schedule+"\n  run: {handler: h}\n  payload: "+payload+"\n"), 0o644)
		return p
	}
	good := write("good.yaml", `{cron: "@daily"}`, "{}")
	out, errOut, code := run(t, "--server", addr, "jobs", "create", "-f", good)
	_, goneID, _ := strings.Cut(out, "(id ")
	goneID, _, _ = strings.Cut(goneID, ",")
	if code != 0 || len(goneID) != 36 {
		t.Fatalf("create: %s %s", out, errOut)
	}
	if out, errOut, code := run(t, "--server", addr, "jobs", "delete", "gone"); code != 0 {
		t.Fatalf("delete: %s %s", out, errOut)
	}
	zero := write("zero.yaml", "{at: 0001-01-01T00:00:00Z}", "{}")
	feb31 := write("feb31.yaml", `{cron: "0 0 31 2 *"}`, "{}")
	deep := write("deep.yaml", `{cron: "@daily"}`, strings.Repeat("[", 65)+strings.Repeat("]", 65))
	big := write("big.yaml", `{cron: "@daily"}`, "{id: 9007199254740993}")
	before := count()

	id := "0190c0b4-0000-7000-8000-000000000000"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "pause", "missing"}, "not_found: job not found: default/missing"},
		{[]string{"jobs", "resume", "missing", "-n", "team"}, "not_found: job not found: team/missing"},
		{[]string{"jobs", "delete", "missing"}, "not_found"},
		{[]string{"jobs", "pause", id}, "not_found"},
		{[]string{"jobs", "pause", goneID}, "failed_precondition: job is deleted"},
		{[]string{"jobs", "resume", goneID}, "failed_precondition"},
		{[]string{"jobs", "delete", goneID}, "failed_precondition"},
		{[]string{"jobs", "get", "missing"}, "not_found"},
		{[]string{"jobs", "trigger", "missing"}, "not_found"},
		{[]string{"jobs", "list", "--page-size", "9999"}, "invalid_argument: page_size"},
		{[]string{"runs", "list", "--job", "missing"}, "not_found"},
		{[]string{"runs", "get", id}, "not_found"},
		{[]string{"runs", "get", "not-a-uuid"}, "invalid_argument: id: not a UUID"},
		{[]string{"runs", "cancel", id}, "not_found"},
		{[]string{"dlq", "list", "--job", "missing"}, "not_found"},
		{[]string{"dlq", "replay", "not-a-uuid"}, "invalid_argument"},
		{[]string{"schedule", "preview", "--at", "0001-01-01T00:00:00Z"}, `invalid_argument: schedule.at: "0001-01-01T00:00:00Z" is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z`},
		{[]string{"schedule", "preview", "--cron", "0 0 31 2 *"}, `invalid_argument: schedule.cron: "0 0 31 2 *" never fires`},
		{[]string{"schedule", "preview", "--cron", "@daily", "--from", "0001-01-01T00:00:00Z"}, "--from: 0001-01-01T00:00:00Z is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z"},
		{[]string{"jobs", "create", "-f", zero}, zero + `:5:14: spec.schedule.at: "0001-01-01T00:00:00Z" is outside`},
		{[]string{"jobs", "create", "-f", feb31}, feb31 + `:5:14: spec.schedule.cron: "0 0 31 2 *" never fires`},
		{[]string{"jobs", "create", "-f", deep}, deep + ":7:12: spec.steps[0].payload: nests arrays and objects more than 64 levels deep; the limit is 64"},
		{[]string{"jobs", "create", "-f", big}, big + ":7:12: spec.steps[0].payload: number 9007199254740993 is beyond ±9007199254740991 (2^53-1)"},
		{[]string{"apply", "-f", zero}, zero + ":5:14: spec.schedule.at"},
	} {
		args := append([]string{"--server", addr}, tt.args...)
		out, errOut, code := run(t, args...)
		oneLineError(t, args, out, errOut, code, tt.want)
	}
	if after := count(); after != before {
		t.Fatalf("rows: %d before the failing verbs, %d after", before, after)
	}
	if out, errOut, code := run(t, "--server", addr, "jobs", "list"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("the server stopped answering: %d %q %s\n%s", code, out, errOut, serve.Logs())
	}
	if strings.Contains(serve.Logs(), "panic") {
		t.Fatalf("the server panicked:\n%s", serve.Logs())
	}
}

// validate rejects what the server would, with file:line:col: times out of
// range, cron expressions that never fire, payloads nested too deep or
// holding integers a double would round; it accepts 29 February.
func TestValidateRejectsImpossibleInput(t *testing.T) {
	dir := t.TempDir()
	job := func(name, schedule, payload string) string {
		return fmt.Sprintf("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: %s}\nspec:\n  schedule: %s\n  run: {handler: h}\n  payload: %s\n", name, schedule, payload)
	}
	files := map[string]string{
		"zero.yaml":  job("zero", "{at: 0001-01-01T00:00:00Z}", "{}"),
		"late.yaml":  job("late", `{at: "10000-01-01T00:00:00Z"}`, "{}"),
		"feb31.yaml": job("feb31", `{cron: "0 0 31 2 *", timezone: Europe/Paris}`, "{}"),
		"deep.yaml":  job("deep", `{cron: "@daily"}`, strings.Repeat("{a: ", 5000)+"1"+strings.Repeat("}", 5000)),
		"big.yaml":   job("big", `{cron: "@daily"}`, "[1, 2, 9007199254740993]"),
		"ok.yaml":    job("leap", `{cron: "0 0 29 2 *"}`, "{id: 9007199254740991, deep: [[[[1]]]]}"),
	}
	for name, body := range files {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	_, errOut, code := run(t, "validate", "-f", dir)
	for _, want := range []string{
		"zero.yaml:5:14: spec.schedule.at: \"0001-01-01T00:00:00Z\" is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z",
		"late.yaml:5:14: spec.schedule.at: \"10000-01-01T00:00:00Z\" is not an RFC 3339 instant",
		"feb31.yaml:5:14: spec.schedule.cron: \"0 0 31 2 *\" never fires: no date in the calendar has day-of-month 31 in month 2",
		"deep.yaml:7:12: spec.steps[0].payload: nests arrays and objects more than 64 levels deep; the limit is 64",
		"big.yaml:7:12: spec.steps[0].payload: number 9007199254740993 is beyond ±9007199254740991 (2^53-1), the limit",
		"5 problem(s) in 6 file(s)",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("validate output lacks %q:\n%s", want, errOut)
		}
	}
	if code != 1 || strings.Contains(errOut, "ok.yaml") {
		t.Fatalf("validate: exit %d\n%s", code, errOut)
	}
	if out, errOut, code := run(t, "validate", "-f", filepath.Join(dir, "ok.yaml")); code != 0 || !strings.Contains(out, "1 job(s) in 1 file(s) are valid") {
		t.Fatalf("29 February: %d %s %s", code, out, errOut)
	}
}

// validate and apply read regular files only: a YAML name in the folder
// that is a device (through a symlink) or a FIFO is refused at once, not
// read for ever.
func TestValidateRefusesFilesThatAreNotFiles(t *testing.T) {
	t.Parallel()
	for name, create := range map[string]func(p string) error{
		"device": func(p string) error { return os.Symlink("/dev/zero", p) },
		"fifo":   func(p string) error { return syscall.Mkfifo(p, 0o644) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := create(filepath.Join(dir, "x.yaml")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var errb bytes.Buffer
			cmd := exec.CommandContext(ctx, binary, "validate", "-f", dir)
			cmd.Stderr = &errb
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatal("validate was still reading after 30 s")
			}
			if err == nil || !strings.Contains(errb.String(), "not a regular file") {
				t.Fatalf("validate: %v\n%s", err, errb.String())
			}
		})
	}
}
