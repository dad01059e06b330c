package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrBadPageToken: a page token that this server did not hand out.
var ErrBadPageToken = errors.New("bad page token")

// EncodePageToken makes an opaque page token of a keyset position (the
// last row's sort key): clients pass it back, never read it.
func EncodePageToken(pos any) string {
	b, _ := json.Marshal(pos)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodePageToken reads a token made by EncodePageToken into pos.
func DecodePageToken(token string, pos any) error {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || json.Unmarshal(b, pos) != nil {
		return ErrBadPageToken
	}
	return nil
}

// NextPage trims rows, fetched with a limit of size+1, to one page and
// returns the token of the next page, made of key(last row), or "" when
// this page is the last.
func NextPage[T any](rows []T, size int, key func(T) any) ([]T, string) {
	if len(rows) <= size {
		return rows, ""
	}
	rows = rows[:size]
	return rows, EncodePageToken(key(rows[size-1]))
}

// NextBudgetedPage is NextPage for a query that also cut its page at a
// byte budget: pageRows is how many rows the page held before the cut
// (the query's count over the page), so a page cut short still has a next
// one, after its last row.
func NextBudgetedPage[T any](rows []T, size int, pageRows int64, key func(T) any) ([]T, string) {
	rows, next := NextPage(rows, size, key)
	if next == "" && len(rows) > 0 && pageRows > int64(len(rows)) {
		next = EncodePageToken(key(rows[len(rows)-1]))
	}
	return rows, next
}

// PlannedPerCall runs db's statements with a plan for each call's
// parameters (pgx's describe-and-execute mode, an unnamed statement), not
// a cached one. The list queries whose filters are optional
// (`@x IS NULL OR col = @x`) need it: after five calls PostgreSQL may
// switch a prepared statement to a generic plan, which cannot tell a
// filter that is off from one that is on, and a filtered run list that
// took 5 ms took 2 s (BenchmarkWebUIHistory). It costs a round trip to
// describe the statement and its planning on every call.
func PlannedPerCall(db DBTX) DBTX { return perCall{db} }

type perCall struct{ db DBTX }

func (p perCall) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return p.db.Exec(ctx, sql, append([]any{pgx.QueryExecModeDescribeExec}, args...)...)
}

func (p perCall) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.db.Query(ctx, sql, append([]any{pgx.QueryExecModeDescribeExec}, args...)...)
}

func (p perCall) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return p.db.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeDescribeExec}, args...)...)
}
