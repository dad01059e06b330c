package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/executor"
)

// A Go handler returns nil to succeed, an error to fail the attempt and
// have it retried (with backoff, up to the step's max_attempts), or
// executor.Permanent(err) to fail it for good (a dead letter).
func ExamplePermanent() {
	load := func(ctx context.Context, c executor.Call) error {
		var p struct{ Table string }
		if err := json.Unmarshal(c.Payload, &p); err != nil || p.Table == "" {
			return executor.Permanent(errors.New("payload names no table")) // retrying cannot help
		}
		return errors.New("warehouse unavailable") // worth a retry
	}
	r := &executor.Runner{Handlers: map[string]executor.HandlerFunc{"load": load}}
	for _, payload := range []string{`{}`, `{"table": "sales"}`} {
		res := r.Run(context.Background(), executor.Call{Step: "load", Attempt: 1, Payload: []byte(payload),
			Executor: dag.Executor{Handler: "load"}})
		fmt.Printf("%s: ok %v, retryable %v, %s\n", payload, res.OK, res.Retryable, res.Error)
	}
	// Output:
	// {}: ok false, retryable false, payload names no table
	// {"table": "sales"}: ok false, retryable true, warehouse unavailable
}

// An attempt's idempotency key is the same for every delivery of that
// attempt (a redelivery after a worker died, a retried report): a handler
// with side effects outside Orrery dedupes on it.
func ExampleCall_IdempotencyKey() {
	c := executor.Call{RunID: uuid.MustParse("0190c6a0-0000-7000-8000-000000000001"), Step: "charge", Attempt: 2}
	fmt.Println(c.IdempotencyKey())
	// Output: 0190c6a0-0000-7000-8000-000000000001/charge/2
}
