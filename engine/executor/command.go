package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orrery-dev/orrery/dag"
)

// CommandRunner runs command steps whose program the worker allows. The
// process gets its own process group, killed whole when the attempt times
// out or is cancelled, and a minimal environment (commandEnv).
type CommandRunner struct {
	// Allow lists the programs command steps may run: absolute path.Match
	// patterns such as /opt/etl/* or /usr/bin/python3, or "*" for any
	// program. A step's argv[0] must be an absolute path with no template.
	// It is cleaned and its folders' symlinks resolved, and so are the
	// patterns' leading folders; one pattern must then match both the
	// program's name and its real path (its own symlink resolved too):
	// /bin/* allows /bin/sh when /bin links to /usr/bin and sh to dash,
	// but a symlink in an allowed folder that leads out of it is refused
	// unless a pattern names that symlink exactly.
	Allow []string
	// Secrets says which secret references in a step's env resolve; nil
	// resolves none.
	Secrets *SecretPolicy
	// AllowEnv lists the variable names (path.Match patterns: ETL_*,
	// PASSWORD) a step's env may set. Empty: any name but those that
	// change which code a program runs (riskyEnv); given, only the names
	// it matches, risky ones included if named.
	AllowEnv []string
	// User runs the programs as another account (the worker runs as root):
	// its user and group, no supplementary groups. Nil: as the worker's
	// own user, which can then read what the worker can (its files, its
	// /proc/PID/environ).
	User *syscall.Credential
	// Sandbox runs the programs inside bubblewrap (see Sandbox); nil: as
	// plain child processes, which see what the worker's user sees.
	Sandbox *Sandbox
	// Refused, when set, refuses every command step with this reason (a
	// sandbox was asked for and is not available on this worker): the
	// attempt fails, retryably, for another worker to run it.
	Refused string
	// Ceilings bound each step's processes, memory and file size (see
	// Ceilings); nil: none.
	Ceilings *Ceilings
}

// LookupUser is the credential of the account name (a user name or a
// numeric id), for CommandRunner.User; switching to it needs root, which
// the error says when the worker lacks it.
func LookupUser(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("no user %q on this machine", name)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %q: ids %s:%s are not numbers", name, u.Uid, u.Gid)
	}
	if os.Geteuid() != 0 {
		if uint32(uid) != uint32(os.Geteuid()) {
			return nil, fmt.Errorf("user %q: running commands as another user needs a worker running as root", name)
		}
		return nil, nil // the worker's own
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// riskyEnv are the variables a step's env may not set unless AllowEnv
// names them: they change which code the allowed program loads or runs
// (the dynamic loader, the shell, interpreters' module paths and
// options, tools' command hooks and configuration folders), so setting
// them would get round --allow-command (GIT_SSH_COMMAND=/bin/sh...).
// Names are matched in upper case too (npm reads npm_config_* in any
// case). A list cannot know every program's hooks, and it guards only
// programs whose arguments are fixed: an allowed shell, git, tar, make or
// interpreter runs any program through its arguments alone. A strict
// worker gives AllowEnv and allows only programs of fixed behaviour.
var riskyEnv = []string{
	"LD_*", "DYLD_*", "GCONV_PATH", "PATH", "IFS", "ENV", "BASH_ENV", "BASH_FUNC_*", "SHELLOPTS", "BASHOPTS",
	"PS4", "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE", "HOME", "XDG_*", "TMPDIR",
	"PYTHON*", "PERL*", "RUBY*", "GEM_*", "NODE_*", "NPM_*", "JAVA_*", "_JAVA_*", "JDK_JAVA_*", "CLASSPATH",
	"GIT_*", "SSH_*", "EDITOR", "VISUAL", "PAGER", "MANPAGER", "BROWSER", "SHELL", "LESS*", "OPENSSL_*",
	"SSL_*", "SSLKEYLOGFILE", "CURL_*", "WGET*", "SYSTEM_WGETRC", "TAR_*", "RSYNC_*", "MAKE*", "MFLAGS",
	"LUA_*", "ZDOTDIR", "PHP*", "GNUPGHOME", "YARN_*", "PIP_*", "GZIP", "HOSTALIASES",
	"RESOLV_HOST_CONF", "LOCALDOMAIN",
}

// envAllowed reports whether a step may set the variable name, and why not.
func (r *CommandRunner) envAllowed(name string) (bool, string) {
	if len(r.AllowEnv) > 0 {
		if matchesAny(r.AllowEnv, name) {
			return true, ""
		}
		return false, fmt.Sprintf("env %s is not allowed on this worker (--allow-env)", name)
	}
	if matchesAny(riskyEnv, strings.ToUpper(name)) { // npm reads npm_config_* in any case
		return false, fmt.Sprintf("env %s is refused on this worker: it changes which code a program runs (allow it by name with --allow-env)", name)
	}
	return true, ""
}

// CommandPath is the PATH a command step runs with.
const CommandPath = "/usr/local/bin:/usr/bin:/bin"

// inheritedEnv are the worker's variables a command step inherits when
// they are set: the locale and the time zone, which are not secrets and
// make output match the machine's. HOME is not among them: tools find the
// worker's credentials through it (~/.aws, ~/.netrc, ~/.pgpass).
var inheritedEnv = []string{"LANG", "TZ"}

// matchesAny reports whether name matches one of the path.Match patterns.
func matchesAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// checkEnvPattern checks a variable name pattern (ETL_*, PASSWORD) of
// --allow-env or --secret-env.
func checkEnvPattern(p string) error {
	if _, err := path.Match(p, ""); err != nil || p == "" || strings.ContainsAny(p, "=/\x00") {
		return fmt.Errorf("%q is not an environment variable name or pattern", p)
	}
	return nil
}

// CheckAllowEnv checks AllowEnv's patterns.
func CheckAllowEnv(patterns []string) error {
	for _, p := range patterns {
		if err := checkEnvPattern(p); err != nil {
			return err
		}
	}
	return nil
}

// CheckAllow checks allow-list patterns: "*", or absolute and well formed.
func CheckAllow(patterns []string) error {
	for _, p := range patterns {
		if p == "*" {
			continue
		}
		if !filepath.IsAbs(p) {
			return fmt.Errorf("allowed command %q: want an absolute path pattern such as /opt/etl/*, or *", p)
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("allowed command %q: %v", p, err)
		}
	}
	return nil
}

// Run runs the step's command.
func (r *CommandRunner) Run(ctx context.Context, c Call) Result {
	spec := c.Executor.Command
	if len(spec.Argv) == 0 {
		return Result{ExitReason: ReasonError, FailureClass: ClassUser, Error: "command has no argv"}
	}
	if r.Refused != "" {
		return Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true, Error: r.Refused}
	}
	program, refused := r.program(spec.Argv[0])
	if refused != nil {
		return *refused
	}
	if refused := r.sandboxRefuses(program, spec.Dir); refused != nil {
		return *refused
	}
	argv := make([]string, len(spec.Argv))
	argv[0] = spec.Argv[0]
	for i, a := range spec.Argv[1:] {
		if c.Evaluated {
			argv[i+1] = a
			continue
		}
		v, err := expand(a, c)
		if err != nil {
			return Result{ExitReason: ReasonError, FailureClass: ClassUser, Error: fmt.Sprintf("argv[%d]: %v", i+1, err)}
		}
		argv[i+1] = v
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		if ok, why := r.envAllowed(k); !ok {
			return Result{ExitReason: ReasonError, FailureClass: ClassUser, Error: why}
		}
	}
	env, serr := commandEnv(c, spec.Env, r.Secrets)
	if serr != nil {
		return serr.result()
	}
	// The real path runs (what was checked, not a symlink that may have
	// changed since), under the name the step gave it.
	cmd := exec.CommandContext(ctx, program)
	cmd.Args = argv
	cmd.Dir = spec.Dir
	if r.Sandbox != nil {
		// bwrap gets the step's environment only: inside, it is PID 1,
		// whose environ every process of the sandbox may read.
		dir := spec.Dir
		if dir != "" {
			dir, _ = filepath.EvalSymlinks(dir) // checked by sandboxRefuses
		}
		cmd = exec.CommandContext(ctx, r.Sandbox.Bwrap, r.Sandbox.args(program, argv, dir)...)
	}
	var step *stepCgroups
	if r.Ceilings != nil {
		run := append([]string{cmd.Path}, cmd.Args[1:]...) // the program by its real path: prlimit runs it so
		s, bounded, err := r.Ceilings.enter(run, c.CPU, c.Memory)
		if err != nil {
			return Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true, Error: err.Error()}
		}
		defer s.release()
		step = s
		dir := cmd.Dir
		cmd = exec.CommandContext(ctx, bounded[0], bounded[1:]...)
		cmd.Dir = dir
	}
	cmd.Env = env
	if len(c.Payload) > 0 {
		cmd.Stdin = bytes.NewReader(c.Payload)
	}
	out, log := &tail{max: MaxOutput}, &tail{max: MaxLog}
	cmd.Stdout, cmd.Stderr = out, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: r.User}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	res := Result{Output: out.String(), OutputTruncated: out.cut, Log: log.String()}
	var exitErr *exec.ExitError
	switch {
	// A process that exited 0 before the kill reached it (it had ended,
	// and this worker had not yet waited for it: a worker stopped and
	// resumed, or a cancellation racing its end) succeeded: Run reports
	// the context's error whenever Cancel ran, the wait status says what
	// the process did.
	case err == nil, ctx.Err() != nil && cmd.ProcessState != nil && cmd.ProcessState.Success():
		res.OK = true
	case ctx.Err() != nil:
		res.Error = "killed: " + context.Cause(ctx).Error()
	case errors.As(err, &exitErr):
		res.ExitReason, res.FailureClass, res.Retryable = ReasonExitCode, ClassUser, true
		res.Error = fmt.Sprintf("exit code %d", exitErr.ExitCode())
	default:
		res.ExitReason, res.FailureClass, res.Retryable = ReasonError, ClassSystem, true
		res.Error = err.Error()
	}
	if step != nil && !res.OK {
		if why := step.passed(cmd.ProcessState); why != "" {
			res.ExitReason, res.FailureClass = ReasonLimit, ClassUser
			if step.asked && counter(step.memory, "memory.oom_control", "oom_kill") > 0 {
				res.ExitReason, res.Retryable = ReasonResources, true // per its retry policy
			}
			res.Error = why + " (" + res.Error + ")"
		}
	}
	return res
}

// sandboxRefuses refuses, for good, a program or working folder the
// sandbox does not show (the step's author's to fix, or the worker's
// --sandbox-ro); nil without a sandbox.
func (r *CommandRunner) sandboxRefuses(program, dir string) *Result {
	if r.Sandbox == nil {
		return nil
	}
	if !r.Sandbox.Visible(program) {
		return &Result{ExitReason: ReasonError, FailureClass: ClassUser,
			Error: fmt.Sprintf("program %s is outside this worker's sandbox (allow its folder with --sandbox-ro)", program)}
	}
	if dir != "" {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil || !r.Sandbox.Visible(real) {
			return &Result{ExitReason: ReasonError, FailureClass: ClassUser,
				Error: fmt.Sprintf("dir %s is outside this worker's sandbox (allow it with --sandbox-ro or --sandbox-rw)", dir)}
		}
	}
	return nil
}

// commandEnv is a command step's whole environment: PATH=CommandPath, the
// worker's inheritedEnv, the step's env (secret references resolved), and
// the ORRERY_* variables, which a step's env cannot override. Nothing else
// of the worker's environment.
func commandEnv(c Call, stepEnv map[string]string, secrets *SecretPolicy) ([]string, *secretError) {
	env := []string{"PATH=" + CommandPath}
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(stepEnv)) {
		val, err := secrets.resolve(c.Tenant, c.Namespace, stepEnv[k])
		if err != nil {
			return nil, err
		}
		env = append(env, k+"="+val)
	}
	// Last: os/exec keeps the last value of a repeated name.
	return append(env,
		"ORRERY_RUN_ID="+c.RunID.String(), "ORRERY_TASK_ID="+c.TaskID.String(), "ORRERY_STEP="+c.Step,
		fmt.Sprintf("ORRERY_ATTEMPT=%d", c.Attempt), "ORRERY_SCHEDULED_FOR="+c.ScheduledFor.UTC().Format(time.RFC3339),
		"ORRERY_IDEMPOTENCY_KEY="+c.IdempotencyKey()), nil
}

// program checks argv[0] against the allow-list and returns the real path
// to run, or the refusal. Refusals are the step's problem (not retried);
// a program missing on this worker is retried (another may have it).
func (r *CommandRunner) program(name string) (string, *Result) {
	refuse := func(format string, a ...any) (string, *Result) {
		return "", &Result{ExitReason: ReasonError, FailureClass: ClassUser, Error: fmt.Sprintf(format, a...)}
	}
	if strings.Contains(name, "{{") {
		return refuse("argv[0] %q is a template: the program must be a fixed absolute path (templates are allowed in the other arguments)", name)
	}
	if !filepath.IsAbs(name) {
		return refuse("command %q is not allowed on this worker: the program must be an absolute path (no PATH lookup)", name)
	}
	notAllowed := func() (string, *Result) {
		return refuse("command %q is not allowed on this worker (--allow-command)", name)
	}
	all := false
	var written []string   // the patterns, cleaned
	var patterns []pattern // and resolved
	for _, p := range r.Allow {
		if p == "*" {
			all = true
		} else if filepath.IsAbs(p) {
			written = append(written, filepath.Clean(p))
			patterns = append(patterns, resolvePattern(filepath.Clean(p)))
		}
	}
	if !all && len(patterns) == 0 {
		return notAllowed()
	}
	// The program by its name (its folder's symlinks resolved) and by its
	// real path (its own symlink too).
	clean := filepath.Clean(name)
	var named string
	if dir, err := filepath.EvalSymlinks(filepath.Dir(clean)); err == nil {
		named = filepath.Join(dir, filepath.Base(clean))
	}
	// Allowed by name: it decides only which error a failure reports, so
	// that a step learns nothing about paths outside the allow-list.
	byName := all || matchAny(written, clean)
	for _, p := range patterns {
		byName = byName || (named != "" && match(p.named, named))
	}
	real, err := filepath.EvalSymlinks(clean)
	if err != nil {
		if !byName {
			return notAllowed()
		}
		return "", &Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true, Error: fmt.Sprintf("command %s: %v", name, err)}
	}
	if all {
		return real, nil
	}
	for _, p := range patterns {
		if match(p.named, named) && match(p.real, real) {
			return real, nil
		}
	}
	if byName {
		return refuse("command %q is not allowed on this worker: it resolves to %s, which its pattern does not allow (--allow-command)", name, real)
	}
	return notAllowed()
}

// pattern is an allow-list pattern resolved for matching: named matches
// a program by its name (leading folders resolved), real by its real path
// (all symlinks resolved). They differ only for a pattern with no
// wildcard that names a symlink: it allows that symlink, run under its
// name, and nothing else that resolves to the same file.
type pattern struct{ named, real string }

func match(pattern, program string) bool {
	ok, _ := path.Match(pattern, program)
	return ok
}

func matchAny(patterns []string, program string) bool {
	for _, p := range patterns {
		if match(p, program) {
			return true
		}
	}
	return false
}

// resolvePattern resolves the symlinks of a clean absolute pattern's
// leading folders, up to its first element with a wildcard; of a pattern
// with none, the folders, then the whole path for its real form. Parts
// that do not exist stay as written.
func resolvePattern(p string) pattern {
	elems := strings.Split(p, "/")
	fixed := len(elems)
	for i, e := range elems {
		if strings.ContainsAny(e, `*?[\`) {
			fixed = i
			break
		}
	}
	if fixed == len(elems) { // no wildcard
		out := pattern{named: p, real: p}
		if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			out.named = filepath.Join(dir, filepath.Base(p))
			out.real = out.named
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			out.real = real
		}
		return out
	}
	prefix := strings.Join(elems[:fixed], "/")
	real, err := filepath.EvalSymlinks(prefix)
	if prefix == "" || err != nil {
		return pattern{named: p, real: p}
	}
	p = strings.TrimSuffix(real, "/") + "/" + strings.Join(elems[fixed:], "/")
	return pattern{named: p, real: p}
}

// expand fills {{ .ScheduledFor }}, {{ .RunID }}, {{ .Step }}, {{ .Attempt }},
// {{ .Job }} and {{ .Namespace }} in an argument (dag.ExpandArg: those
// references only, no template language).
func expand(arg string, c Call) (string, error) {
	if !strings.Contains(arg, "{{") {
		return arg, nil
	}
	return dag.ExpandArg(arg, map[string]string{
		"ScheduledFor": c.ScheduledFor.UTC().Format(time.RFC3339), "RunID": c.RunID.String(), "Step": c.Step,
		"Attempt": strconv.Itoa(c.Attempt), "Job": c.Job, "Namespace": c.Namespace,
	})
}

// tail keeps the last max bytes written to it; cut says bytes were
// dropped.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
		t.cut = true
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
