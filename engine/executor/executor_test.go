package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
)

// testCall returns a call with every field set to a recognisable value.
func testCall(e dag.Executor) Call {
	return Call{
		RunID:        uuid.MustParse("11111111-2222-3333-4444-555555555555"),
		TaskID:       uuid.MustParse("66666666-7777-8888-9999-aaaaaaaaaaaa"),
		JobID:        uuid.MustParse("bbbbbbbb-cccc-dddd-eeee-ffffffffffff"),
		Tenant:       "acme",
		Namespace:    "etl",
		Job:          "nightly-load",
		Step:         "extract",
		Attempt:      3,
		FencingToken: 42,
		// Not UTC on purpose: the executors must report the instant in UTC.
		ScheduledFor: time.Date(2024, 3, 10, 4, 30, 0, 0, time.FixedZone("UTC+2", 2*60*60)),
		Trigger:      "schedule",
		Executor:     e,
	}
}

const scheduledForUTC = "2024-03-10T02:30:00Z"

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expiringCtx is a context whose deadline passes when the test says so:
// Err reports context.DeadlineExceeded once expire is called. It lets a
// test reach a precise point (say, a child process has started) before
// "timing out", with no race against a wall-clock deadline.
type expiringCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiringCtx() *expiringCtx {
	return &expiringCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *expiringCtx) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }
func (c *expiringCtx) Done() <-chan struct{}       { return c.done }
func (c *expiringCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
func (c *expiringCtx) expire() { c.once.Do(func() { close(c.done) }) }

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	c := testCall(dag.Executor{})
	if got, want := c.IdempotencyKey(), "11111111-2222-3333-4444-555555555555/extract/3"; got != want {
		t.Fatalf("IdempotencyKey() = %q, want %q", got, want)
	}
	c.Attempt = 4
	if got, want := c.IdempotencyKey(), "11111111-2222-3333-4444-555555555555/extract/4"; got != want {
		t.Fatalf("IdempotencyKey() after a new attempt = %q, want %q", got, want)
	}
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("bad input")
	p := Permanent(base)
	if p.Error() != "bad input" {
		t.Errorf("Permanent(err).Error() = %q, want the wrapped message", p.Error())
	}
	if !errors.Is(p, base) {
		t.Error("errors.Is(Permanent(err), err) = false, want true")
	}
}

func TestRunnerHandlers(t *testing.T) {
	t.Parallel()
	base := errors.New("warehouse unreachable")
	tests := []struct {
		name    string
		handler HandlerFunc
		want    Result
	}{
		{
			name:    "success",
			handler: func(context.Context, Call) error { return nil },
			want:    Result{OK: true},
		},
		{
			name:    "error is retryable",
			handler: func(context.Context, Call) error { return base },
			want:    Result{ExitReason: ReasonError, FailureClass: ClassUser, Retryable: true, Error: "warehouse unreachable"},
		},
		{
			name:    "permanent error is not retryable",
			handler: func(context.Context, Call) error { return Permanent(base) },
			want:    Result{ExitReason: ReasonError, FailureClass: ClassUser, Retryable: false, Error: "warehouse unreachable"},
		},
		{
			name:    "wrapped permanent error is not retryable",
			handler: func(context.Context, Call) error { return fmt.Errorf("load: %w", Permanent(base)) },
			want:    Result{ExitReason: ReasonError, FailureClass: ClassUser, Retryable: false, Error: "load: warehouse unreachable"},
		},
		{
			name:    "panic with a string is recovered",
			handler: func(context.Context, Call) error { panic("boom") },
			want:    Result{ExitReason: ReasonError, FailureClass: ClassUser, Retryable: true, Error: "handler panicked: boom"},
		},
		{
			name:    "panic with an error is recovered",
			handler: func(context.Context, Call) error { panic(base) },
			want:    Result{ExitReason: ReasonError, FailureClass: ClassUser, Retryable: true, Error: "handler panicked: warehouse unreachable"},
		},
		{
			name: "runtime panic is recovered",
			handler: func(context.Context, Call) error {
				var m map[string]int
				//lint:ignore SA5000 the test needs a runtime panic
				m["x"] = 1 // assignment to entry in nil map
				return nil
			},
			want: Result{ExitReason: ReasonError, FailureClass: ClassUser, Retryable: true, Error: "handler panicked: assignment to entry in nil map"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &Runner{Handlers: map[string]HandlerFunc{"load": tt.handler}}
			got := r.Run(context.Background(), testCall(dag.Executor{Handler: "load"}))
			if got != tt.want {
				t.Fatalf("Run() = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

func TestRunnerPassesCallToHandler(t *testing.T) {
	t.Parallel()
	type ctxKey struct{}
	want := testCall(dag.Executor{Handler: "load"})
	want.Payload = []byte(`{"table":"orders"}`)
	var got Call
	var gotValue any
	r := &Runner{Handlers: map[string]HandlerFunc{"load": func(ctx context.Context, c Call) error {
		got, gotValue = c, ctx.Value(ctxKey{})
		return nil
	}}}
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	if res := r.Run(ctx, want); !res.OK {
		t.Fatalf("Run() = %+v, want OK", res)
	}
	if got.RunID != want.RunID || got.TaskID != want.TaskID || got.JobID != want.JobID || got.Namespace != want.Namespace ||
		got.Job != want.Job || got.Step != want.Step || got.Attempt != want.Attempt || got.FencingToken != want.FencingToken ||
		!got.ScheduledFor.Equal(want.ScheduledFor) || got.Trigger != want.Trigger || string(got.Payload) != string(want.Payload) {
		t.Errorf("handler got call %+v\nwant %+v", got, want)
	}
	if gotValue != "v" {
		t.Errorf("handler context lacks the caller's values: got %v", gotValue)
	}
}

func TestRunnerRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		runner    *Runner
		exec      dag.Executor
		want      Result
		wantInErr string
	}{
		{
			name:   "unknown handler",
			runner: &Runner{Handlers: map[string]HandlerFunc{"other": func(context.Context, Call) error { return nil }}},
			exec:   dag.Executor{Handler: "missing"},
			want:   Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true},
			// Retryable: another worker may have the handler.
			wantInErr: "no handler missing registered",
		},
		{
			name:      "unknown handler with no handler map",
			runner:    &Runner{},
			exec:      dag.Executor{Handler: "missing"},
			want:      Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true},
			wantInErr: "no handler missing registered",
		},
		{
			name:      "command on a worker that runs no commands",
			runner:    &Runner{},
			exec:      dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/echo", "hi"}}},
			want:      Result{ExitReason: ReasonError, FailureClass: ClassUser},
			wantInErr: "runs no commands",
		},
		{
			name:      "step with no executor",
			runner:    &Runner{},
			exec:      dag.Executor{},
			want:      Result{ExitReason: ReasonError, FailureClass: ClassUser},
			wantInErr: "no executor",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.runner.Run(context.Background(), testCall(tt.exec))
			if !strings.Contains(got.Error, tt.wantInErr) {
				t.Errorf("Run().Error = %q, want it to contain %q", got.Error, tt.wantInErr)
			}
			got.Error = ""
			if got != tt.want {
				t.Errorf("Run() = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

// A worker whose Runner has no HTTPRunner must not crash on an HTTP step.
// Today that works only through the panic recovery (nil pointer), which
// reports it as a handler panic.
func TestRunnerNilHTTPDoesNotCrash(t *testing.T) {
	t.Parallel()
	r := &Runner{}
	got := r.Run(context.Background(), testCall(dag.Executor{HTTP: &dag.HTTPExecutor{URL: "http://127.0.0.1:1/", Method: "POST"}}))
	if got.OK || got.ExitReason != ReasonError || got.Error == "" {
		t.Fatalf("Run() = %+v, want a failed attempt", got)
	}
}

func TestRunnerHandlerContextEnds(t *testing.T) {
	t.Parallel()
	blockUntilDone := func(ctx context.Context, _ Call) error {
		<-ctx.Done()
		return ctx.Err()
	}
	// A handler that ignores its context and returns success still succeeds.
	ignore := func(ctx context.Context, _ Call) error {
		<-ctx.Done()
		return nil
	}
	tests := []struct {
		name    string
		handler HandlerFunc
		ctx     func() (context.Context, context.CancelFunc)
		want    Result
	}{
		{
			name:    "step timeout",
			handler: blockUntilDone,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			},
			want: Result{ExitReason: ReasonTimeout, FailureClass: ClassUser, Retryable: true, Error: context.DeadlineExceeded.Error()},
		},
		{
			name:    "worker cancellation",
			handler: blockUntilDone,
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			},
			want: Result{ExitReason: ReasonCancelled, FailureClass: ClassSystem, Retryable: true, Error: context.Canceled.Error()},
		},
		{
			name: "permanent error after the timeout is still retried as a timeout",
			handler: func(ctx context.Context, _ Call) error {
				<-ctx.Done()
				return Permanent(errors.New("gave up"))
			},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			},
			want: Result{ExitReason: ReasonTimeout, FailureClass: ClassUser, Retryable: true, Error: "gave up"},
		},
		{
			name:    "panic after cancellation is reported as cancelled",
			handler: func(ctx context.Context, _ Call) error { <-ctx.Done(); panic("late") },
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			},
			want: Result{ExitReason: ReasonCancelled, FailureClass: ClassSystem, Retryable: true, Error: "handler panicked: late"},
		},
		{
			name:    "success after the timeout stays a success",
			handler: ignore,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			},
			want: Result{OK: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := tt.ctx()
			defer cancel()
			r := &Runner{Handlers: map[string]HandlerFunc{"h": tt.handler}}
			got := r.Run(ctx, testCall(dag.Executor{Handler: "h"}))
			if got != tt.want {
				t.Fatalf("Run() = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

func TestStorable(t *testing.T) {
	long := strings.Repeat("€", 30000) // 90,000 bytes
	tests := []struct{ err, out, wantErr, wantOut string }{
		{"ok", "fine", "ok", "fine"},
		{"a\x00b", "c\xffd", "a\uFFFDb", "c\uFFFDd"},
		{"", long, "", long[len(long)-(MaxOutput/3)*3:]},                                       // the tail, cut between characters
		{long, "", long[:(MaxError/3)*3], ""},                                                  // the head
		{"", strings.Repeat("\xff", MaxOutput), "", "\uFFFD"},                                  // a run of bad bytes: one replacement
		{"", strings.Repeat("\xffa", MaxOutput/2), "", strings.Repeat("\uFFFDa", MaxOutput/4)}, // longer once replaced: cut again
	}
	for i, tt := range tests {
		got := Result{Error: tt.err, Output: tt.out}.Storable()
		if got.Error != tt.wantErr || got.Output != tt.wantOut {
			t.Errorf("%d: error %d bytes %q..., output %d bytes; want %d and %d", i, len(got.Error), got.Error[:min(len(got.Error), 10)], len(got.Output), len(tt.wantErr), len(tt.wantOut))
		}
	}
}
