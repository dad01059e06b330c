package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"River's text", errors.New("error fetching jobs: failed to connect to `user=postgres database=x`"), true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, false},
		{"plain", errors.New("job not found"), false},
		{"the caller's deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), false},
		{"nil", nil, false},
	} {
		if got := IsUnavailable(tc.err); got != tc.want {
			t.Errorf("%s: IsUnavailable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// Only an error the server reported for a statement it did not carry out
// says the statement changed nothing; a lost connection, or an error that
// leaves the outcome open (CockroachDB's ambiguous commit, a shutdown), does
// not.
func TestIsServerError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unique violation", fmt.Errorf("create: %w", &pgconn.PgError{Code: "23505"}), true},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, true},
		{"lock timeout", &pgconn.PgError{Code: "55P03"}, true},
		{"ambiguous result", fmt.Errorf("commit: %w", &pgconn.PgError{Code: "40003"}), false},
		{"connection exception", &pgconn.PgError{Code: "08006"}, false},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, false},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, false},
		{"connection lost", fmt.Errorf("commit: %w", io.ErrUnexpectedEOF), false},
		{"deadline", context.DeadlineExceeded, false},
	} {
		if got := IsServerError(tc.err); got != tc.want {
			t.Errorf("%s: IsServerError(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Thirty components' errors during an outage make one line; when the ping
// answers again, one more says the database is back and how many were
// not logged. Other errors pass untouched.
func TestOutageIsLoggedOncePerStateChange(t *testing.T) {
	var buf syncBuffer
	h, o := OutageHandler(slog.NewTextHandler(&buf, nil))
	o.every = 10 * time.Millisecond
	var up atomic.Bool
	o.Watch(func(context.Context) error {
		if up.Load() {
			return nil
		}
		return syscall.ECONNREFUSED
	})
	log := slog.New(h).With("component", "test")
	for i := range 30 {
		log.Error("scheduler pass failed", "err", fmt.Errorf("pass %d: %w", i, syscall.ECONNREFUSED))
	}
	log.Error("something else", "err", errors.New("boom"))
	up.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(buf.String(), "database available again") {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery line:\n%s", buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	out := buf.String()
	if n := strings.Count(out, "scheduler pass failed"); n != 1 {
		t.Fatalf("%d outage lines, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "something else") || !strings.Contains(out, "repeated_errors_not_logged=29") {
		t.Fatalf("want the unrelated error and the count of dropped ones:\n%s", out)
	}
}
