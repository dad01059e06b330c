package api

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgconn"
)

// A commit whose outcome the database cannot tell (CockroachDB's 40003) is
// answered Unavailable, saying so: not Internal, which reads as a failure
// that changed nothing.
func TestAmbiguousCommitIsUnavailable(t *testing.T) {
	err := toConnect(context.Background(), nil, fmt.Errorf("create: %w", &pgconn.PgError{Code: "40003", Message: "result is ambiguous"}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("code %v (%v), want Unavailable", connect.CodeOf(err), err)
	}
}
