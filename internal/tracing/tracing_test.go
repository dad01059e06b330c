package tracing_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/orrery-dev/orrery/internal/tracing"
)

// With traces off, a caller's trace (a traceparent that reached the API)
// is not taken as the run's: nothing is stored on the run, nothing is sent
// on to webhooks.
func TestTracesOffStoreNoTraceParent(t *testing.T) {
	in := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": in})
	if got := tracing.StartRun(ctx); got != "" {
		t.Fatalf("traces off: the run's traceparent is %q, want none", got)
	}
	if got := tracing.TraceParent(tracing.FromTraceParent(context.Background(), "")); got != "" {
		t.Fatalf("no stored traceparent continues as %q", got)
	}
}
