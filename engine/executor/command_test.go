package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
)

func cmdCall(argv ...string) Call {
	return testCall(dag.Executor{Command: &dag.CommandExecutor{Argv: argv}})
}

// runCmd runs argv through a Runner whose CommandRunner allows /bin/*.
func runCmd(ctx context.Context, c Call) Result {
	return (&Runner{Command: &CommandRunner{Allow: []string{"/bin/*"}}}).Run(ctx, c)
}

func TestCommandOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		argv       []string
		want       Result // without Error and Output
		wantErr    string // exact Error
		wantOutput string // exact Output
	}{
		{
			name:       "exit 0",
			argv:       []string{"/bin/echo", "hello", "world"},
			want:       Result{OK: true},
			wantOutput: "hello world\n",
		},
		{
			name:       "exit 0 with no output",
			argv:       []string{"/bin/sh", "-c", "exit 0"},
			want:       Result{OK: true},
			wantOutput: "",
		},
		{
			name:       "non-zero exit",
			argv:       []string{"/bin/sh", "-c", "echo partial; exit 3"},
			want:       Result{ExitReason: ReasonExitCode, FailureClass: ClassUser, Retryable: true},
			wantErr:    "exit code 3",
			wantOutput: "partial\n",
		},
		{
			name:       "stdout is the output, stderr the log",
			argv:       []string{"/bin/sh", "-c", "echo out; echo err >&2; echo out2; exit 1"},
			want:       Result{ExitReason: ReasonExitCode, FailureClass: ClassUser, Retryable: true, Log: "err\n"},
			wantErr:    "exit code 1",
			wantOutput: "out\nout2\n",
		},
		{
			name:    "exit 255",
			argv:    []string{"/bin/sh", "-c", "exit 255"},
			want:    Result{ExitReason: ReasonExitCode, FailureClass: ClassUser, Retryable: true},
			wantErr: "exit code 255",
		},
		{
			// A child killed by a signal (not by the runner) has no exit
			// code; os/exec reports -1.
			name:    "killed by a signal of its own",
			argv:    []string{"/bin/sh", "-c", "kill -KILL $$"},
			want:    Result{ExitReason: ReasonExitCode, FailureClass: ClassUser, Retryable: true},
			wantErr: "exit code -1",
		},
		{
			name:    "arguments are not run through a shell",
			argv:    []string{"/bin/echo", "$HOME", "a b", "*", "'q'"},
			want:    Result{OK: true},
			wantErr: "", wantOutput: "$HOME a b * 'q'\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := runCmd(context.Background(), cmdCall(tt.argv...))
			if got.Error != tt.wantErr {
				t.Errorf("Error = %q, want %q", got.Error, tt.wantErr)
			}
			if got.Output != tt.wantOutput {
				t.Errorf("Output = %q, want %q", got.Output, tt.wantOutput)
			}
			got.Error, got.Output = "", ""
			if got != tt.want {
				t.Errorf("Run() = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

func TestCommandProgramNotFound(t *testing.T) {
	t.Parallel()
	prog := filepath.Join(t.TempDir(), "no-such-program")
	got := (&Runner{Command: &CommandRunner{Allow: []string{"*"}}}).Run(context.Background(), cmdCall(prog))
	if !strings.Contains(got.Error, "no such file") {
		t.Errorf("Error = %q, want it to say the program is missing", got.Error)
	}
	got.Error = ""
	// Retryable: another worker may have the program.
	if want := (Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true}); got != want {
		t.Errorf("Run() = %+v\nwant    %+v", got, want)
	}
}

func TestCommandEnvironmentStdinAndDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := testCall(dag.Executor{Command: &dag.CommandExecutor{
		Argv: []string{"/bin/sh", "-c", `printf '%s|' "$ORRERY_RUN_ID" "$ORRERY_TASK_ID" "$ORRERY_STEP" "$ORRERY_ATTEMPT" ` +
			`"$ORRERY_SCHEDULED_FOR" "$ORRERY_IDEMPOTENCY_KEY" "$STEP_VAR" "$(pwd -P)"; cat`},
		Env: map[string]string{"STEP_VAR": "plain value"},
		Dir: dir,
	}})
	c.Payload = []byte(`{"table":"orders"}`)
	got := runCmd(context.Background(), c)
	want := "11111111-2222-3333-4444-555555555555|66666666-7777-8888-9999-aaaaaaaaaaaa|extract|3|" + scheduledForUTC +
		"|11111111-2222-3333-4444-555555555555/extract/3|plain value|" + realDir + `|{"table":"orders"}`
	if !got.OK || got.Output != want {
		t.Fatalf("Run() = %+v\nwant output %q", got, want)
	}
}

func TestCommandNoPayloadMeansEmptyStdin(t *testing.T) {
	t.Parallel()
	// With no payload, stdin is /dev/null: cat ends at once.
	got := runCmd(context.Background(), cmdCall("/bin/cat"))
	if !got.OK || got.Output != "" {
		t.Fatalf("Run() = %+v, want OK with no output", got)
	}
}

// No t.Parallel: t.Setenv.
func TestCommandSecretEnv(t *testing.T) {
	t.Setenv("ORRERY_TEST_CMD_SECRET", "hunter2")
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := testCall(dag.Executor{Command: &dag.CommandExecutor{
		Argv: []string{"/bin/sh", "-c", `printf '%s|%s' "$PASSWORD" "$KEY"`},
		Env:  map[string]string{"PASSWORD": "secret://env/ORRERY_TEST_CMD_SECRET", "KEY": "secret://file" + keyFile},
	}})
	secrets := &SecretPolicy{Env: map[string][]string{"acme/etl": {"ORRERY_TEST_CMD_SECRET"}}, Dirs: map[string][]string{"acme/etl": {filepath.Dir(keyFile)}}}
	got := (&Runner{Command: &CommandRunner{Allow: []string{"/bin/*"}, Secrets: secrets}}).Run(context.Background(), c)
	if !got.OK || got.Output != "hunter2|from-file" {
		t.Fatalf("Run() = %+v, want OK with output %q", got, "hunter2|from-file")
	}
}

func TestCommandMissingSecretDoesNotRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	c := testCall(dag.Executor{Command: &dag.CommandExecutor{
		Argv: []string{"/bin/sh", "-c", `touch "$0"`, marker},
		Env:  map[string]string{"PASSWORD": "secret://file" + filepath.Join(dir, "missing")},
	}})
	// The folder is allowed, the file is missing: retried, another worker
	// may have it.
	secrets := &SecretPolicy{Dirs: map[string][]string{"acme/etl": {dir}}}
	got := (&Runner{Command: &CommandRunner{Allow: []string{"/bin/*"}, Secrets: secrets}}).Run(context.Background(), c)
	if got.OK || got.ExitReason != ReasonError || got.FailureClass != ClassSystem || !got.Retryable {
		t.Errorf("Run() = %+v, want a retryable system error", got)
	}
	if !strings.Contains(got.Error, "cannot read the file") {
		t.Errorf("Error = %q, want it to explain the secret", got.Error)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran despite the unresolved secret (stat: %v)", err)
	}
}

// allowListLayout builds, under a fresh folder dir:
//
//	dir/jobs/good       a copy of /bin/sh (a real file)
//	dir/jobs/link-in    -> good (a symlink that stays inside jobs/)
//	dir/jobs/link-out   -> /bin/sh (a symlink out of jobs/)
//	dir/jobs/chain      -> ../bin/evil (out of jobs/ in two steps)
//	dir/bin/evil        -> /bin/sh
//	dir/alias           -> jobs (a symlinked folder)
func allowListLayout(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"jobs", "bin"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "jobs", "good"), sh, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"jobs/link-in": "good", "jobs/link-out": "/bin/sh", "jobs/chain": "../bin/evil", "bin/evil": "/bin/sh", "alias": "jobs",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCommandAllowList(t *testing.T) {
	t.Parallel()
	dir := allowListLayout(t)
	realSh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	const (
		notAllowed = "is not allowed on this worker (--allow-command)"
		resolves   = "is not allowed on this worker: it resolves to "
		absolute   = "the program must be an absolute path"
		template   = "is a template: the program must be a fixed absolute path"
	)
	tests := []struct {
		name    string
		allow   []string
		program string
		wantErr string // substring of the refusal; "" means the program runs
	}{
		// /bin/sh may well be /usr/bin/dash: patterns' leading folders
		// and the program are both resolved.
		{name: "glob match", allow: []string{"/bin/*"}, program: "/bin/sh"},
		{name: "exact match", allow: []string{"/bin/sh"}, program: "/bin/sh"},
		{name: "exact pattern naming a symlink out of its folder", allow: []string{dir + "/jobs/link-out"}, program: dir + "/jobs/link-out"},
		{name: "second pattern matches", allow: []string{"/opt/etl/*", dir + "/jobs/go?d"}, program: dir + "/jobs/good"},
		{name: "star allows everything", allow: []string{"*"}, program: "/bin/sh"},
		{name: "allowed directory", allow: []string{dir + "/jobs/*"}, program: dir + "/jobs/good"},
		{name: "symlink staying inside the allowed directory", allow: []string{dir + "/jobs/*"}, program: dir + "/jobs/link-in"},
		{name: "program through a symlinked folder", allow: []string{dir + "/jobs/*"}, program: dir + "/alias/good"},
		{name: "pattern through a symlinked folder", allow: []string{dir + "/alias/*"}, program: dir + "/jobs/good"},
		{name: "doubled slashes are cleaned", allow: []string{dir + "/jobs/*"}, program: dir + "//jobs//good"},
		{
			name: "dot-dot spelled out in the pattern", allow: []string{dir + "/bin/../jobs/*"},
			program: dir + "/bin/../jobs/good",
		},

		{name: "no patterns refuse everything", allow: nil, program: "/bin/sh", wantErr: notAllowed},
		{name: "other directory", allow: []string{"/opt/etl/*"}, program: "/bin/sh", wantErr: notAllowed},
		{name: "glob does not cross directories", allow: []string{"/*"}, program: "/bin/sh", wantErr: notAllowed},
		{name: "exact pattern refuses others", allow: []string{dir + "/jobs/good"}, program: "/bin/sh", wantErr: notAllowed},
		{name: "malformed pattern matches nothing", allow: []string{"/bin/[", "/bin/\\"}, program: "/bin/sh", wantErr: notAllowed},
		{name: "relative pattern matches nothing", allow: []string{"bin/*"}, program: "/bin/sh", wantErr: notAllowed},
		{name: "symlink out of an allowed directory", allow: []string{dir + "/jobs/*"}, program: dir + "/jobs/link-out", wantErr: resolves + realSh},
		{
			// One pattern must allow both the name and the real path.
			name: "symlink out, its target's folder allowed by another pattern", allow: []string{dir + "/jobs/*", "/bin/*", realSh},
			program: dir + "/jobs/link-out", wantErr: resolves + realSh,
		},
		{
			// A multi-call binary (busybox) acts on its name: allowing
			// one name allows no other.
			name: "exact pattern allows only the name it gives", allow: []string{dir + "/jobs/link-in"},
			program: dir + "/jobs/good", wantErr: notAllowed,
		},
		{name: "exact pattern naming the target refuses a symlink to it", allow: []string{dir + "/jobs/good"}, program: dir + "/jobs/link-in", wantErr: notAllowed},
		{name: "exact pattern through a symlinked folder", allow: []string{dir + "/alias/link-in"}, program: dir + "/jobs/link-in"},
		{name: "symlink chain out of an allowed directory", allow: []string{dir + "/jobs/*"}, program: dir + "/jobs/chain", wantErr: resolves + realSh},
		{
			// dir/jobs/../bin/evil is dir/bin/evil.
			name: "dot-dot out of an allowed directory", allow: []string{dir + "/jobs/*/*/*"},
			program: dir + "/jobs/../bin/evil", wantErr: notAllowed,
		},
		{
			name: "dot element matched by a wildcard", allow: []string{dir + "/*/jobs/*"},
			program: dir + "/./jobs/good", wantErr: notAllowed,
		},
		{
			// Missing or not, a path outside the allow-list gets the same
			// answer: a step learns nothing of the worker's files.
			name: "missing program outside the allow-list", allow: []string{dir + "/jobs/*"},
			program: dir + "/bin/missing", wantErr: notAllowed,
		},

		// Relative programs: no PATH lookup, not even under "*".
		{name: "bare name", allow: []string{"/bin/*"}, program: "sh", wantErr: absolute},
		{name: "bare name under star", allow: []string{"*"}, program: "sh", wantErr: absolute},
		{name: "relative path", allow: []string{"*"}, program: "./jobs/good", wantErr: absolute},
		{name: "relative path with a folder", allow: []string{"*"}, program: "bin/sh", wantErr: absolute},

		// Templates in argv[0]: refused before expansion, whatever they
		// would expand to.
		{
			name: "template expanding outside an allowed directory", allow: []string{dir + "/jobs/*"},
			program: dir + `/jobs/{{ printf "..%cbin%cevil" 47 47 }}`, wantErr: template,
		},
		{
			name: "template expanding to an allowed program", allow: []string{dir + "/jobs/*"},
			program: dir + `/jobs/{{ printf "%s" "good" }}`, wantErr: template,
		},
		{name: "template under star", allow: []string{"*"}, program: `/bin/{{ .Step }}`, wantErr: template},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			marker := filepath.Join(t.TempDir(), "ran")
			c := cmdCall(tt.program, "-c", `/usr/bin/touch "$0"`, marker)
			got := (&Runner{Command: &CommandRunner{Allow: tt.allow}}).Run(context.Background(), c)
			_, statErr := os.Stat(marker)
			ran := statErr == nil
			if tt.wantErr == "" {
				if !got.OK || !ran {
					t.Fatalf("Run() = %+v (ran %v), want the program to run", got, ran)
				}
				return
			}
			if ran {
				t.Errorf("the program ran, want it refused (result %+v)", got)
			}
			if !strings.Contains(got.Error, tt.wantErr) {
				t.Errorf("Error = %q, want it to contain %q", got.Error, tt.wantErr)
			}
			if !strings.Contains(got.Error, fmt.Sprintf("%q", tt.program)) {
				t.Errorf("Error = %q, want it to name argv[0] %q", got.Error, tt.program)
			}
			got.Error = ""
			// Not retryable: the step's spec is the problem.
			if want := (Result{ExitReason: ReasonError, FailureClass: ClassUser}); got != want {
				t.Errorf("Run() = %+v\nwant    %+v", got, want)
			}
		})
	}
}

// A program the allow-list names but this worker lacks is retried:
// another worker may have it.
func TestCommandAllowedButMissing(t *testing.T) {
	t.Parallel()
	dir := allowListLayout(t)
	got := (&Runner{Command: &CommandRunner{Allow: []string{dir + "/jobs/*"}}}).Run(context.Background(), cmdCall(dir+"/jobs/missing"))
	if !strings.Contains(got.Error, "no such file") {
		t.Errorf("Error = %q, want it to say the program is missing", got.Error)
	}
	got.Error = ""
	if want := (Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true}); got != want {
		t.Errorf("Run() = %+v\nwant    %+v", got, want)
	}
}

// The program keeps the name the step gave it as argv[0], though the
// worker runs its real path.
func TestCommandKeepsArgv0(t *testing.T) {
	t.Parallel()
	dir := allowListLayout(t)
	got := (&Runner{Command: &CommandRunner{Allow: []string{dir + "/jobs/*"}}}).Run(context.Background(),
		cmdCall(dir+"/jobs/link-in", "-c", `echo "$0"`))
	if want := dir + "/jobs/link-in\n"; !got.OK || got.Output != want {
		t.Fatalf("Run() = %+v, want output %q", got, want)
	}
}

func TestCheckAllow(t *testing.T) {
	t.Parallel()
	for _, ok := range [][]string{nil, {"*"}, {"/bin/*", "/opt/etl/run"}} {
		if err := CheckAllow(ok); err != nil {
			t.Errorf("CheckAllow(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range [][]string{{"bin/*"}, {"sh"}, {"/bin/["}, {"/bin/*", "./x"}} {
		if err := CheckAllow(bad); err == nil {
			t.Errorf("CheckAllow(%q) = nil, want an error", bad)
		}
	}
}

func TestCommandTemplateExpansion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		arg        string
		wantOutput string // of /bin/echo arg
		wantErr    string // substring; "" means success
	}{
		{name: "scheduled instant in UTC", arg: "--date={{ .ScheduledFor }}", wantOutput: "--date=" + scheduledForUTC},
		{name: "run id", arg: "{{.RunID}}", wantOutput: "11111111-2222-3333-4444-555555555555"},
		{name: "step", arg: "{{ .Step }}", wantOutput: "extract"},
		{name: "attempt", arg: "try-{{ .Attempt }}", wantOutput: "try-3"},
		{name: "job", arg: "{{ .Job }}", wantOutput: "nightly-load"},
		{name: "namespace", arg: "{{ .Namespace }}", wantOutput: "etl"},
		{name: "several fields", arg: "{{ .Namespace }}/{{ .Job }}/{{ .Step }}", wantOutput: "etl/nightly-load/extract"},
		{name: "trim-free spacing", arg: "{{.Job}}-{{   .Step   }}", wantOutput: "nightly-load-extract"},
		{name: "no template", arg: "plain }} text", wantOutput: "plain }} text"},
		{name: "a literal {{", arg: `{{ "{{" }}.State}} of {{ .Job }}`, wantOutput: "{{.State}} of nightly-load"},
		{name: "unknown field", arg: "{{ .TaskID }}", wantErr: "argv[1]:"},
		{name: "unknown field message", arg: "{{ .Nope }}", wantErr: `{{ .Nope }} is not one of {{ .ScheduledFor }}, {{ .RunID }}`},
		{name: "parse error", arg: "{{ .Step ", wantErr: "argv[1]: \"{{ .Step \": {{ without a closing }}"},
		// Only plain references: no template language, whose loops and
		// functions would let a job spend the worker's CPU and memory.
		{name: "no functions", arg: `{{ printf "%05d" .Attempt }}`, wantErr: `{{ printf "%05d" .Attempt }} is not one of`},
		{name: "no loops", arg: `{{ range 2000000000000 }}x{{ end }}`, wantErr: `{{ range 2000000000000 }} is not one of`},
		{name: "unknown function", arg: "{{ env \"HOME\" }}", wantErr: `is not one of`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := runCmd(context.Background(), cmdCall("/bin/echo", tt.arg))
			if tt.wantErr == "" {
				if !got.OK || got.Output != tt.wantOutput+"\n" {
					t.Fatalf("Run() = %+v, want OK with output %q", got, tt.wantOutput+"\n")
				}
				return
			}
			if !strings.Contains(got.Error, tt.wantErr) {
				t.Errorf("Error = %q, want it to contain %q", got.Error, tt.wantErr)
			}
			got.Error = ""
			if want := (Result{ExitReason: ReasonError, FailureClass: ClassUser}); got != want {
				t.Errorf("Run() = %+v\nwant    %+v", got, want)
			}
		})
	}
}

func TestCommandOutputKeepsTheTail(t *testing.T) {
	t.Parallel()
	// 12,000 numbered lines, about 130 KB, on stdout and on stderr.
	script := `i=0; while [ $i -lt 12000 ]; do echo "line $i"; echo "err $i" >&2; i=$((i+1)); done`
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("failing=%v", fail), func(t *testing.T) {
			t.Parallel()
			s := script
			if fail {
				s += "; exit 7"
			}
			got := runCmd(context.Background(), cmdCall("/bin/sh", "-c", s))
			if got.OK == fail {
				t.Fatalf("Run() = %+v", got)
			}
			var out, log strings.Builder
			for i := 0; i < 12000; i++ {
				fmt.Fprintf(&out, "line %d\n", i)
				fmt.Fprintf(&log, "err %d\n", i)
			}
			if want := out.String()[out.Len()-MaxOutput:]; got.Output != want || !got.OutputTruncated {
				t.Errorf("Output (%d bytes, truncated %v) is not the last %d bytes of stdout", len(got.Output), got.OutputTruncated, MaxOutput)
			}
			if want := log.String()[log.Len()-MaxLog:]; got.Log != want {
				t.Errorf("Log (%d bytes) is not the last %d bytes of stderr", len(got.Log), MaxLog)
			}
		})
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{name: "nothing", max: 4, want: ""},
		{name: "under the bound", max: 4, writes: []string{"ab"}, want: "ab"},
		{name: "exactly the bound", max: 4, writes: []string{"ab", "cd"}, want: "abcd"},
		{name: "over the bound in small writes", max: 4, writes: []string{"ab", "cd", "ef"}, want: "cdef"},
		{name: "one write over the bound", max: 4, writes: []string{"abcdefgh"}, want: "efgh"},
		{name: "long write then short", max: 4, writes: []string{"abcdefgh", "ij"}, want: "ghij"},
		{name: "empty writes", max: 4, writes: []string{"", "abc", ""}, want: "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tl := &tail{max: tt.max}
			for _, w := range tt.writes {
				if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", w, n, err, len(w))
				}
			}
			if got := tl.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

// processGone reports whether pid no longer runs. A killed process whose
// parent died stays a zombie until PID 1 reaps it, and some container
// inits never do; a zombie counts as gone.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...; comm may hold spaces or parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	state := stat[i+2]
	return state == 'Z' || state == 'X'
}

// startTree runs, through a Runner, a shell that starts a background
// sleep (a grandchild of the test) and then sleeps itself. It returns once
// the grandchild runs, with its pid and a channel that yields the result.
func startTree(t *testing.T, ctx context.Context) (grandchild int, result <-chan Result) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	// Write the pid to a temporary file and rename it, so that a reader
	// never sees a partial pid.
	c := cmdCall("/bin/sh", "-c", `sleep 30 & echo $! > "$0.tmp" && mv "$0.tmp" "$0"; sleep 30`, pidFile)
	ch := make(chan Result, 1)
	go func() { ch <- runCmd(ctx, c) }()
	eventually(t, "the grandchild's pid file", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		grandchild, err = strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("pid file holds %q", b)
		}
		return true
	})
	// $! is the shell's child as soon as it forks, before it execs sleep.
	eventually(t, fmt.Sprintf("pid %d to be a running sleep", grandchild), func() bool {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", grandchild))
		if err != nil || processGone(grandchild) {
			t.Fatalf("pid %d is gone (%v)", grandchild, err)
		}
		return strings.TrimSpace(string(comm)) == "sleep"
	})
	pgid, err := syscall.Getpgid(grandchild)
	if err != nil {
		t.Fatal(err)
	}
	if pgid == syscall.Getpgrp() {
		t.Fatalf("the command runs in the test's own process group %d", pgid)
	}
	// Should the runner fail to kill them, leave no sleeps behind.
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	return grandchild, ch
}

func waitResult(t *testing.T, ch <-chan Result) Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("the command did not return after its context ended")
		return Result{}
	}
}

func TestCommandTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	ctx := newExpiringCtx()
	grandchild, result := startTree(t, ctx)
	ctx.expire()
	got := waitResult(t, result)
	want := Result{ExitReason: ReasonTimeout, FailureClass: ClassUser, Retryable: true, Error: "killed: " + context.DeadlineExceeded.Error()}
	if got != want {
		t.Errorf("Run() = %+v\nwant    %+v", got, want)
	}
	eventually(t, fmt.Sprintf("grandchild %d to die", grandchild), func() bool { return processGone(grandchild) })
}

func TestCommandCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	grandchild, result := startTree(t, ctx)
	cancel(errors.New("the task was cancelled"))
	got := waitResult(t, result)
	want := Result{ExitReason: ReasonCancelled, FailureClass: ClassSystem, Retryable: true, Error: "killed: the task was cancelled"}
	if got != want {
		t.Errorf("Run() = %+v\nwant    %+v", got, want)
	}
	eventually(t, fmt.Sprintf("grandchild %d to die", grandchild), func() bool { return processGone(grandchild) })
}

// A real wall-clock step timeout, whether it fires before or after the
// shell has started its children.
func TestCommandRealTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	got := runCmd(ctx, cmdCall("/bin/sh", "-c", "sleep 30 & sleep 30"))
	want := Result{ExitReason: ReasonTimeout, FailureClass: ClassUser, Retryable: true, Error: "killed: " + context.DeadlineExceeded.Error()}
	if got != want {
		t.Errorf("Run() = %+v\nwant    %+v", got, want)
	}
}

// CommandRunner used on its own reports a killed command with no exit
// reason; Runner fills it in (see TestCommandTimeoutKillsProcessGroup).
func TestCommandRunnerAloneOnTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	got := (&CommandRunner{Allow: []string{"/bin/*"}}).Run(ctx, cmdCall("/bin/sleep", "30"))
	if got.OK || !strings.HasPrefix(got.Error, "killed: ") {
		t.Errorf("Run() = %+v, want a killed command", got)
	}
}

// With User, the program runs as that account: here nobody, which cannot
// read the worker's own files.
func TestCommandRunsAsAnotherUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if _, err := LookupUser("nobody"); err == nil || !strings.Contains(err.Error(), "needs a worker running as root") {
			t.Errorf("LookupUser(nobody) as a user = %v, want it refused", err)
		}
		return
	}
	nobody, err := LookupUser("nobody")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LookupUser("no-such-user-here"); err == nil {
		t.Error("LookupUser of a missing user = nil error")
	}
	secret := filepath.Join(t.TempDir(), "key")
	os.WriteFile(secret, []byte("worker-secret"), 0o600)
	c := testCall(dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/sh", "-c",
		`id -u; cat "$0" || echo file-refused`, secret}}})
	res := (&Runner{Command: &CommandRunner{Allow: []string{"/bin/*"}, User: nobody}}).Run(context.Background(), c)
	if !res.OK || !strings.HasPrefix(res.Output, fmt.Sprintf("%d\n", nobody.Uid)) || !strings.Contains(res.Output, "file-refused") ||
		strings.Contains(res.Output, "worker-secret") {
		t.Errorf("Run() = %+v, want it run as uid %d without the worker's file", res, nobody.Uid)
	}
}
