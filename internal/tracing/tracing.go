// Package tracing sets up OpenTelemetry traces from the standard OTEL_*
// environment variables, and carries a run's trace between the processes
// that work on it.
//
// Traces are off unless OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), is
// set; the exporter speaks OTLP over HTTP and reads its own variables
// (headers, timeout, ...); sampling follows OTEL_TRACES_SAMPLER (default
// parentbased_always_on) and OTEL_TRACES_SAMPLER_ARG, and the service name
// OTEL_SERVICE_NAME (default "orrery").
//
// One trace per run: when a run is created (fired, triggered), a root span
// orrery.run is started for it, linked to what created it (the firing
// transaction's span, the API call's), and its W3C traceparent is stored
// on the run. Workers continue that trace: orrery.queue (release to start,
// on the database's clock), orrery.attempt and orrery.executor spans, and
// an http step sends the traceparent header onward.
package tracing

import (
	"context"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Enabled reports whether the environment asks for traces.
func Enabled() bool {
	return os.Getenv("OTEL_TRACES_EXPORTER") == "otlp" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the global tracer provider and the W3C propagator when
// the environment asks for traces; the returned func flushes and stops
// it. Without OTEL_* settings it changes nothing (the global provider
// stays a no-op) and returns a no-op.
func Setup(ctx context.Context) (func(context.Context) error, error) {
	if !Enabled() || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		// No propagator either: a client's traceparent is neither stored on
		// runs nor sent on to webhooks while traces are off.
		return func(context.Context) error { return nil }, nil
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	name := os.Getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "orrery"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", name)))
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// Tracer is Orrery's tracer (from the global provider).
func Tracer() trace.Tracer { return otel.Tracer("github.com/orrery-dev/orrery") }

// TraceParent is the W3C traceparent of ctx's span ("" when none is
// recorded).
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c.Get("traceparent")
}

// FromTraceParent returns ctx continuing the trace of a stored
// traceparent (ctx unchanged for "").
func FromTraceParent(ctx context.Context, traceParent string) context.Context {
	if traceParent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceParent})
}

// StartRun starts a run's root span, linked to ctx's span (what created
// it), and returns its traceparent; "" when traces are off or not
// sampled. The span ends at once: it marks the run's creation, and the
// run's later spans hang below it.
func StartRun(ctx context.Context, attrs ...attribute.KeyValue) string {
	link := trace.LinkFromContext(ctx)
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(attrs...)}
	if link.SpanContext.IsValid() {
		opts = append(opts, trace.WithLinks(link))
	}
	rctx, span := Tracer().Start(ctx, "orrery.run", opts...)
	defer span.End()
	// A no-op tracer (traces off) hands back the parent's context; only a
	// recorded span of our own is a run's trace.
	if !span.IsRecording() || !span.SpanContext().IsSampled() {
		return ""
	}
	return TraceParent(rctx)
}
