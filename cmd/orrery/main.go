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

// describe renders an error for people: Connect errors as "code: message".
func describe(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		if ce.Code() == connect.CodeUnavailable || ce.Code() == connect.CodeUnknown && strings.Contains(ce.Message(), "connection refused") {
			return fmt.Sprintf("cannot reach the Orrery server (%s); start one with `make dev` or pass --server", ce.Message())
		}
		return fmt.Sprintf("%s: %s", ce.Code(), ce.Message())
	}
	return err.Error()
}
