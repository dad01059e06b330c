package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// HTTPRunner calls webhooks. The request is a JSON body describing the
// attempt; 2xx succeeds; 408, 429, 5xx, timeouts and connection errors are
// retried; any other 4xx, and a connection or redirect the worker's
// policy refuses, fails for good.
type HTTPRunner struct {
	// Client calls the webhooks; nil means NewHTTPClient(nil), whose
	// egress policy refuses loopback, private and link-local addresses.
	// A client of your own is trusted as it is: its transport decides
	// where it connects. With no CheckRedirect of its own, it follows
	// redirects as checkRedirect says.
	Client *http.Client
	// Secrets says which secret references in a step's headers resolve;
	// nil resolves none.
	Secrets *SecretPolicy
}

type webhookBody struct {
	RunID        string          `json:"run_id"`
	TaskID       string          `json:"task_id"`
	Tenant       string          `json:"tenant"`
	Job          string          `json:"job"`
	Namespace    string          `json:"namespace"`
	Step         string          `json:"step"`
	Attempt      int             `json:"attempt"`
	FencingToken int64           `json:"fencing_token"`
	ScheduledFor time.Time       `json:"scheduled_for"`
	Trigger      string          `json:"trigger"`
	Payload      json.RawMessage `json:"payload,omitempty"`
}

// Run calls the step's webhook.
func (h *HTTPRunner) Run(ctx context.Context, c Call) Result {
	spec := c.Executor.HTTP
	body, _ := json.Marshal(webhookBody{
		RunID: c.RunID.String(), TaskID: c.TaskID.String(), Tenant: c.Tenant, Job: c.Job, Namespace: c.Namespace, Step: c.Step,
		Attempt: c.Attempt, FencingToken: c.FencingToken, ScheduledFor: c.ScheduledFor.UTC(), Trigger: c.Trigger,
		Payload: c.Payload,
	})
	req, err := http.NewRequestWithContext(ctx, spec.Method, spec.URL, bytes.NewReader(body))
	if err != nil {
		return Result{ExitReason: ReasonError, FailureClass: ClassUser, Error: err.Error()}
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Headers)) { // the first bad reference, always the same
		val, err := h.Secrets.resolve(c.Tenant, c.Namespace, spec.Headers[k])
		if err != nil {
			return err.result()
		}
		req.Header.Set(k, val)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "orrery")
	req.Header.Set("Idempotency-Key", c.IdempotencyKey())
	req.Header.Set("X-Orrery-Attempt", fmt.Sprint(c.Attempt))
	req.Header.Set("X-Orrery-Fencing-Token", fmt.Sprint(c.FencingToken))
	// The run's trace goes on at the receiver (W3C traceparent), when
	// traces are on.
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	client := h.Client
	if client == nil {
		client = defaultClient()
	} else if client.CheckRedirect == nil {
		withRedirects := *client
		withRedirects.CheckRedirect = checkRedirect
		client = &withRedirects
	}
	resp, err := client.Do(req)
	if err != nil {
		if res, ok := egressFailure(err); ok {
			return res
		}
		reason := ReasonError
		if errors.Is(err, context.DeadlineExceeded) {
			reason = ReasonTimeout
		}
		return Result{ExitReason: reason, FailureClass: ClassSystem, Retryable: true, Error: err.Error()}
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, MaxOutput+1))
	out := Result{Output: string(answer)}
	if len(answer) > MaxOutput { // the head is kept
		out.Output, out.OutputTruncated = string(answer[:MaxOutput]), true
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		out.OK = true
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests:
		out.ExitReason, out.FailureClass, out.Retryable = ReasonHTTP4xx, ClassSystem, true
	case code >= 500:
		out.ExitReason, out.FailureClass, out.Retryable = ReasonHTTP5xx, ClassSystem, true
	default:
		out.ExitReason, out.FailureClass = ReasonHTTP4xx, ClassUser
	}
	if !out.OK {
		out.Error = fmt.Sprintf("%s %s: %s", spec.Method, spec.URL, resp.Status)
	}
	return out
}
