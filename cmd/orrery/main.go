// Command orrery is Orrery's one binary: the server (serve, dev), schema
// management (migrate), and the client verbs (jobs, schedule, validate).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"connectrpc.com/connect"
)

// defaultGCPercent is the garbage collector's target unless GOGC says
// otherwise: Go's default of 100 spent a seventh of a worker's CPU in the
// storm on collections of a small heap (BENCHMARKS.md, "The execution
// core"); 400 lets it grow to about 1.5 times its size instead (a worker's
// peak from 63 to 94 MiB). GOMEMLIMIT, as Go reads it, bounds it.
const defaultGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "orrery: "+describe(err))
		os.Exit(1)
	}
}

// describe renders an error for people, on one line for any server error:
// Connect errors as "code: message" (after what wrapped them, such as the
// file and line of a create), an unreachable server as a hint to start one.
// Local validation errors keep their one line per problem.
func describe(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	msg := ce.Code().String()
	if ce.Message() != "" {
		msg += ": " + ce.Message()
	}
	if ce.Code() == connect.CodeUnavailable || ce.Code() == connect.CodeUnknown && strings.Contains(ce.Message(), "connection refused") {
		msg = fmt.Sprintf("cannot reach the Orrery server (%s); start one with `make dev` or pass --server", ce.Message())
	}
	if prefix, ok := strings.CutSuffix(err.Error(), ce.Error()); ok {
		msg = prefix + msg
	}
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}
