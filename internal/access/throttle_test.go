package access_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// A source that failed FailuresPerSource verifications makes no more
// lookups: unknown keys, and good keys not verified lately, are refused
// with a ThrottledError naming when to retry, while a key verified lately
// still passes and another source is untouched. A key that failed is
// refused again from memory, without the database.
func TestFailedVerificationsAreThrottled(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	acc := access.New(pool)
	ctx := context.Background()
	mk := func(principal string) string {
		secret, _, err := acc.Create(ctx, access.NewKey{Tenant: "default", Principal: principal, Role: access.Reader, CreatedBy: "test"})
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	cachedKey, uncachedKey := mk("cached"), mk("uncached")
	attacker, bystander := access.WithSource(ctx, "192.0.2.1"), access.WithSource(ctx, "192.0.2.2")
	if _, err := acc.Verify(attacker, cachedKey); err != nil {
		t.Fatal(err)
	}
	unknown := func(i int) string {
		return "ork_" + strings.Repeat(string(rune('a'+i%26)), 42) + string(rune('A'+i/26))
	}
	for i := range access.FailuresPerSource {
		if _, err := acc.Verify(attacker, unknown(i)); !errors.Is(err, access.ErrUnauthenticated) {
			t.Fatalf("failure %d: %v, want unauthenticated", i, err)
		}
	}
	var throttled *access.ThrottledError
	if _, err := acc.Verify(attacker, unknown(99)); !errors.As(err, &throttled) || throttled.RetryAfter <= 0 {
		t.Fatalf("an unknown key past the allowance: %v, want throttled with a delay", err)
	}
	if _, err := acc.Verify(attacker, uncachedKey); !errors.As(err, &throttled) {
		t.Fatalf("an uncached good key from the throttled source: %v, want throttled", err)
	}
	if p, err := acc.Verify(attacker, cachedKey); err != nil || p.Name != "cached" {
		t.Fatalf("a key verified lately from the throttled source: %v, %v; want it to pass", p, err)
	}
	if p, err := acc.Verify(bystander, uncachedKey); err != nil || p.Name != "uncached" {
		t.Fatalf("another source: %v, %v", p, err)
	}
	// With the database gone, a key that failed is still refused as such.
	pool.Close()
	if _, err := acc.Verify(bystander, unknown(0)); !errors.Is(err, access.ErrUnauthenticated) {
		t.Fatalf("a key that failed, asked again without a database: %v, want unauthenticated from memory", err)
	}
}
