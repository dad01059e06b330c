package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"
)

// CommandRunner runs command steps whose program matches one of Allow
// (path.Match patterns such as /opt/etl/*). The process gets its own
// process group, killed whole when the attempt times out or is cancelled.
type CommandRunner struct {
	Allow []string
}

// Run runs the step's command.
func (r *CommandRunner) Run(ctx context.Context, c Call) Result {
	spec := c.Executor.Command
	argv := make([]string, len(spec.Argv))
	for i, a := range spec.Argv {
		v, err := expand(a, c)
		if err != nil {
			return Result{ExitReason: ReasonError, FailureClass: ClassUser, Error: fmt.Sprintf("argv[%d]: %v", i, err)}
		}
		argv[i] = v
	}
	// Check the program that will run: after expansion, since a template
	// in argv[0] can expand to any path.
	if !r.allowed(argv[0]) {
		return Result{ExitReason: ReasonError, FailureClass: ClassUser,
			Error: fmt.Sprintf("command %q is not allowed on this worker (--allow-command)", argv[0])}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(),
		"ORRERY_RUN_ID="+c.RunID.String(), "ORRERY_TASK_ID="+c.TaskID.String(), "ORRERY_STEP="+c.Step,
		fmt.Sprintf("ORRERY_ATTEMPT=%d", c.Attempt), "ORRERY_SCHEDULED_FOR="+c.ScheduledFor.UTC().Format(time.RFC3339),
		"ORRERY_IDEMPOTENCY_KEY="+c.IdempotencyKey())
	for k, v := range spec.Env {
		val, err := resolve(v)
		if err != nil {
			return Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true, Error: err.Error()}
		}
		cmd.Env = append(cmd.Env, k+"="+val)
	}
	if len(c.Payload) > 0 {
		cmd.Stdin = bytes.NewReader(c.Payload)
	}
	out := &tail{max: MaxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	res := Result{Output: out.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
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
	return res
}

func (r *CommandRunner) allowed(program string) bool {
	for _, pattern := range r.Allow {
		if pattern == "*" {
			return true
		}
		if ok, _ := path.Match(pattern, program); ok && !wildDots(pattern, program) {
			return true
		}
	}
	return false
}

// wildDots reports whether program has a "." or ".." element that pattern
// does not spell out: a wildcard matching it would let the program leave
// an allowed directory (/opt/*/bin/* matching /opt/../bin/sh).
func wildDots(pattern, program string) bool {
	pe, ne := strings.Split(pattern, "/"), strings.Split(program, "/")
	for i, e := range ne {
		if (e == "." || e == "..") && (len(pe) != len(ne) || pe[i] != e) {
			return true
		}
	}
	return false
}

// expand fills {{ .ScheduledFor }}, {{ .RunID }}, {{ .Step }}, {{ .Attempt }},
// {{ .Job }} and {{ .Namespace }} in an argument.
func expand(arg string, c Call) (string, error) {
	if !strings.Contains(arg, "{{") {
		return arg, nil
	}
	t, err := template.New("arg").Option("missingkey=error").Parse(arg)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = t.Execute(&b, map[string]any{
		"ScheduledFor": c.ScheduledFor.UTC().Format(time.RFC3339), "RunID": c.RunID.String(), "Step": c.Step,
		"Attempt": c.Attempt, "Job": c.Job, "Namespace": c.Namespace,
	})
	return b.String(), err
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
