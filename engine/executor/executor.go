// Package executor runs one attempt of a step: an HTTP webhook, a command,
// or a Go handler registered in the worker binary. It resolves secret
// references on the worker, at run time, and reports the outcome with an
// exit reason and failure class; it never decides about retries beyond
// saying whether a failure is worth retrying.
package executor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
)

// Call is one attempt of one step.
type Call struct {
	RunID  uuid.UUID
	TaskID uuid.UUID
	JobID  uuid.UUID
	// Tenant is the name of the run's tenant, read from the database with
	// the task (never from the job's text): with Namespace, the scope of
	// the secrets the call may read.
	Tenant       string
	Namespace    string
	Job          string
	Step         string
	Attempt      int
	FencingToken int64
	ScheduledFor time.Time
	Trigger      string
	Payload      json.RawMessage
	Executor     dag.Executor
	// Evaluated says the step's expressions, and the {{ .Field }}
	// references of its command's arguments, are filled in already
	// (dag.StepExprs.Apply): the executor runs Executor as it is.
	Evaluated bool
	// CPU (millicores) and Memory (bytes) are what the step asks for
	// (docs/resources.md): a command step's cgroups hold it to them; 0:
	// only the worker's ceilings.
	CPU, Memory int64
}

// IdempotencyKey is stable across deliveries of one attempt, so handlers
// can dedupe: run/step/attempt.
func (c Call) IdempotencyKey() string {
	return c.RunID.String() + "/" + c.Step + "/" + itoa(c.Attempt)
}

// Exit reasons and failure classes.
const (
	ReasonError        = "error"
	ReasonTimeout      = "timeout"
	ReasonCancelled    = "cancelled"
	ReasonLeaseExpired = "lease_expired"
	ReasonHTTP4xx      = "http_4xx"
	ReasonHTTP5xx      = "http_5xx"
	ReasonExitCode     = "exit_code"
	// ReasonExpression: an expression of the step could not be evaluated
	// (docs/workflows.md); the step did not run.
	ReasonExpression = "expression"

	ClassUser   = "user"
	ClassSystem = "system"
)

// Result is how an attempt ended.
type Result struct {
	OK           bool
	ExitReason   string
	FailureClass string
	Retryable    bool
	Error        string
	// Output is what the step returned (an HTTP response's body, a
	// command's standard output, a handler's SetOutput): what later steps'
	// expressions read. At most MaxOutput bytes: an HTTP body's head, a
	// command's tail; OutputTruncated says bytes were cut.
	Output          string
	OutputTruncated bool
	// Log is the tail of a command's standard error, at most MaxLog bytes.
	Log string
}

// MaxOutput bounds the output kept per attempt.
const MaxOutput = 64 << 10

// MaxLog bounds the log kept per attempt.
const MaxLog = 8 << 10

// MaxError bounds the error kept per attempt.
const MaxError = 4 << 10

// Storable makes r's error, output and log what the database can keep:
// valid UTF-8 without NUL (a cut in the middle of a character, a binary
// byte or a NUL becomes U+FFFD), the error's head at most MaxError bytes,
// the output's tail at most MaxOutput bytes (marked OutputTruncated when
// cut) and the log's tail at most MaxLog bytes, cut between characters.
// Without it, a report whose output PostgreSQL refuses could never be
// written, and its attempt would stay running.
func (r Result) Storable() Result {
	r.Error, _ = storableText(r.Error, MaxError, false)
	out, cut := storableText(r.Output, MaxOutput, true)
	r.OutputTruncated = r.OutputTruncated || cut
	r.Output = out
	r.Log, _ = storableText(r.Log, MaxLog, true)
	return r
}

// StorableError is an error text as Storable keeps it: valid UTF-8
// without NUL, its head at most MaxError bytes.
func StorableError(s string) string {
	out, _ := storableText(s, MaxError, false)
	return out
}

// storableText is s as the database keeps it; cut says characters were
// dropped to fit max.
func storableText(s string, max int, tail bool) (out string, cut bool) {
	if len(s) > max { // cut first: ToValidUTF8 below must not see megabytes
		cut = true
		if tail {
			s = s[len(s)-max:]
		} else {
			s = s[:max]
		}
	}
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
	for len(s) > max { // the replacements may have made it longer
		cut = true
		if tail {
			_, n := utf8.DecodeRuneInString(s)
			s = s[n:]
		} else {
			_, n := utf8.DecodeLastRuneInString(s)
			s = s[:len(s)-n]
		}
	}
	return s, cut
}

// HandlerFunc is a step implemented in Go, registered in a worker binary
// by name. Returning an error fails the attempt (retried unless wrapped
// with Permanent); a panic fails it too.
type HandlerFunc func(ctx context.Context, call Call) error

// SetOutput sets the output of the handler's attempt: v as JSON (a
// string as it is), what later steps' expressions read as
// steps.STEP.output. The last call wins; without one the output is empty.
// It does nothing outside a handler's call.
func SetOutput(ctx context.Context, v any) error {
	slot, ok := ctx.Value(outputKey{}).(*string)
	if !ok {
		return nil
	}
	if s, isText := v.(string); isText {
		*slot = s
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	*slot = string(b)
	return nil
}

type outputKey struct{}

// Permanent marks a handler error as not worth retrying.
func Permanent(err error) error { return permanentError{err} }

type permanentError struct{ error }

func (p permanentError) Unwrap() error { return p.error }

// Runner runs calls on this worker.
type Runner struct {
	HTTP *HTTPRunner
	// Command runs command steps; nil refuses them.
	Command  *CommandRunner
	Handlers map[string]HandlerFunc
}

// Run runs one attempt. ctx carries the step's timeout and the worker's
// cancellation; Run reports which of the two ended it.
func (r *Runner) Run(ctx context.Context, c Call) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			res = Result{ExitReason: ReasonError, FailureClass: ClassUser, Retryable: true, Error: "handler panicked: " + toString(p)}
		}
		if !res.OK && ctx.Err() != nil {
			res.Retryable = true
			res.FailureClass = ClassSystem
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				res.ExitReason, res.FailureClass = ReasonTimeout, ClassUser
			} else {
				res.ExitReason = ReasonCancelled
			}
		}
		res = res.Storable()
	}()
	switch e := c.Executor; {
	case e.HTTP != nil:
		return r.HTTP.Run(ctx, c)
	case e.Command != nil:
		if r.Command == nil {
			return Result{ExitReason: ReasonError, FailureClass: ClassUser, Error: "this worker runs no commands (start it with --allow-command)"}
		}
		return r.Command.Run(ctx, c)
	case e.Handler != "":
		h, ok := r.Handlers[e.Handler]
		if !ok {
			return Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true, Error: "no handler " + e.Handler + " registered in this worker"}
		}
		var output string
		if err := h(context.WithValue(ctx, outputKey{}, &output), c); err != nil {
			var perm permanentError
			return Result{ExitReason: ReasonError, FailureClass: ClassUser, Retryable: !errors.As(err, &perm), Error: err.Error(), Output: output}
		}
		return Result{OK: true, Output: output}
	case e.Worker != "":
		// Its task is in a remote queue, which no worker process serves:
		// only a queue renamed under a stored version could bring it here.
		return Result{ExitReason: ReasonError, FailureClass: ClassSystem, Error: "step runs on remote workers of type " + e.Worker + ", not in a worker process"}
	}
	return Result{ExitReason: ReasonError, FailureClass: ClassUser, Error: "step has no executor"}
}
