package main

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
)

// Server errors print on one line, after what wrapped them; an
// unreachable server gets a hint.
func TestDescribeIsOneLine(t *testing.T) {
	multi := connect.NewError(connect.CodeInvalidArgument, errors.New("jobs[0].spec.schedule.at: bad\njobs[1].metadata.name: bad\n"))
	for _, tt := range []struct {
		err  error
		want string
	}{
		{multi, "invalid_argument: jobs[0].spec.schedule.at: bad; jobs[1].metadata.name: bad"},
		{fmt.Errorf("job.yaml:3: %w", multi), "job.yaml:3: invalid_argument: jobs[0].spec.schedule.at: bad; jobs[1].metadata.name: bad"},
		{connect.NewError(connect.CodeNotFound, errors.New("job not found: default/x")), "not_found: job not found: default/x"},
		{connect.NewError(connect.CodeUnavailable, errors.New("dial tcp: connection refused")), "cannot reach the Orrery server (dial tcp: connection refused); start one with `make dev` or pass --server"},
		{connect.NewError(connect.CodeInternal, errors.New("")), "internal"},
		{errors.New("local\nproblems"), "local\nproblems"},
	} {
		if got := describe(tt.err); got != tt.want {
			t.Errorf("describe(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
