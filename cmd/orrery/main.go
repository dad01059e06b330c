// Command orrery is Orrery's one binary: the server (serve, dev), schema
// management (migrate), and the client verbs (jobs, schedule, validate).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"connectrpc.com/connect"
)

func main() {
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
