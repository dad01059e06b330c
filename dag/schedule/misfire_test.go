package schedule

import (
	"testing"
	"time"
)

func TestCatchUp(t *testing.T) {
	hourly, _ := Parse(Spec{Cron: Crons("0 * * * *")})
	pending := mustTime(t, "2026-05-01T10:00:00Z")
	now := mustTime(t, "2026-05-01T15:30:00Z")
	tests := []struct {
		keep int
		want string
	}{
		{0, "2026-05-01T16:00:00Z"},
		{1, "2026-05-01T15:00:00Z"},
		{3, "2026-05-01T13:00:00Z"},
		{100, "2026-05-01T10:00:00Z"},
	}
	for _, tt := range tests {
		got, ok := hourly.CatchUp(tt.keep, pending, now)
		if !ok || got.Format(time.RFC3339) != tt.want {
			t.Errorf("CatchUp(%d) = %s, %v; want %s", tt.keep, got.Format(time.RFC3339), ok, tt.want)
		}
	}
	if got, _ := hourly.CatchUp(1, mustTime(t, "2026-05-01T16:00:00Z"), now); !got.Equal(mustTime(t, "2026-05-01T16:00:00Z")) {
		t.Errorf("nothing missed, yet CatchUp moved the pending instant to %s", got)
	}
	everySecond, _ := Parse(Spec{Cron: Crons("* * * * * *")})
	got, _ := everySecond.CatchUp(1, mustTime(t, "2026-01-01T00:00:00Z"), now)
	if !got.Equal(now) {
		t.Errorf("every second, months missed: got %s, want %s", got, now)
	}
	once, _ := Parse(Spec{At: "2026-05-01T12:00:00Z"})
	if _, ok := once.CatchUp(0, mustTime(t, "2026-05-01T12:00:00Z"), now); ok {
		t.Error("a missed one-time instant under skip should leave nothing to fire")
	}
	if got, ok := once.CatchUp(1, mustTime(t, "2026-05-01T12:00:00Z"), now); !ok || got.Format(time.RFC3339) != "2026-05-01T12:00:00Z" {
		t.Errorf("a missed one-time instant under fire_once: got %s %v", got, ok)
	}
}
