package api

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
)

// A key's bucket holds perSecond calls: the next is refused (429 over
// REST, with Retry-After) until time refills it; other keys are untouched.
func TestKeyRateRefusesPastItsBucket(t *testing.T) {
	k := newKeyRate(publishesPerSecond, "events", "with this key")
	a, b := uuid.New(), uuid.New()
	now := time.Now()
	for i := range publishesPerSecond {
		if err := k.take(a, now); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	err := k.take(a, now)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || err.(*connect.Error).Meta().Get("Retry-After") != "1" {
		t.Fatalf("past the bucket: %v", err)
	}
	if err := k.take(b, now); err != nil {
		t.Fatalf("another key: %v", err)
	}
	if err := k.take(a, now.Add(10*time.Millisecond)); err != nil { // 20 tokens back
		t.Fatalf("10 ms later: %v", err)
	}
}
