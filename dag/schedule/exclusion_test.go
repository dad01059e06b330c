package schedule

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestExclusionMatchesAsCronDoes compares exclusion.matches, read from the
// parsed fields, with robfig/cron's own answer (its next time after the
// second before), over random wall-clock times.
func TestExclusionMatchesAsCronDoes(t *testing.T) {
	exprs := []string{"* * 1 1 *", "0-1 12 * * *", "*/15 9-17 * * 1-5", "* * 29 2 *", "0 0 13 * 5", "30-45 * 0-22 * * *",
		"* * * * 0,6", "@daily", "@hourly", "0 0 1,15 * 1", "* 0-4 * * *", "0-58 * * * * *"}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, text := range exprs {
		e, err := parseExclusion(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		for range 20_000 {
			w := time.Unix(sampleFrom.Unix()+rng.Int64N(8*365*24*3600), 0).UTC()
			probe := w
			if e.minute {
				probe = w.Truncate(time.Minute)
			}
			want := e.civil.Next(probe.Add(-time.Second)).Equal(probe)
			if got := e.matches(w); got != want {
				t.Fatalf("%q at %s: matches %v, cron says %v", text, w, got, want)
			}
		}
	}
}

func TestAnExcludedStretchIsPassedWhole(t *testing.T) {
	// Every second, none in hours 0-22: one step to 23:00, not 82,800.
	s := mustParse(t, Spec{Cron: Crons("@every 1s"), Exclude: &Exclude{Cron: []string{"* * 0-22 * * *"}}})
	if got := instants(t, s, "2026-12-01T00:00:00Z", 2); strings.Join(got, " ") != "2026-12-01T23:00:00Z 2026-12-01T23:00:01Z" {
		t.Errorf("every second: got %v", got)
	}
	// @every leaves the stretch by whole intervals: 01:05 + 43 × 7m is
	// 06:06, as stepping one interval at a time gives.
	e := mustParse(t, Spec{Cron: Crons("@every 7m"), Exclude: &Exclude{Cron: []string{"* 1-5 * * *"}}})
	if got := instants(t, e, "2026-12-01T00:58:00Z", 1); got[0] != "2026-12-01T06:06:00Z" {
		t.Errorf("every 7m: got %v", got)
	}
	stepped := *e
	stepped.exCrons = nil
	at := mustTime(t, "2026-12-01T00:58:00Z")
	for {
		at, _ = stepped.Next(at)
		if e.Excluded(at) == "" {
			break
		}
	}
	if at.Format(time.RFC3339) != "2026-12-01T06:06:00Z" {
		t.Errorf("stepping one interval at a time: %s", at)
	}
	// New York springs forward on 2026-03-08 at 02:00: local hours 0-4
	// are excluded on both sides of the change, 05:00 EDT (09:00Z) is the
	// first to fire, not 06:00 (the stretch's end read at EST's offset).
	ny := mustParse(t, Spec{Cron: Crons("*/30 * * * *"), Timezone: "America/New_York", Exclude: &Exclude{Cron: []string{"* 0-4 * * *"}}})
	if got := instants(t, ny, "2026-03-08T04:45:00Z", 2); strings.Join(got, " ") != "2026-03-08T09:00:00Z 2026-03-08T09:30:00Z" {
		t.Errorf("across spring forward: got %v", got)
	}
}

func TestNextGivesUpWithWhereToGoOn(t *testing.T) {
	// Two windows that together cover every second of January to June,
	// passed 30 seconds at a time: more stretches than Next passes at once
	// (Validate refuses it; a schedule stored before a change might not).
	s, err := Parse(Spec{Cron: Crons("* * * * * *"), Exclude: &Exclude{Cron: []string{"0-29 * * * 1-6 *", "30-59 * * * 1-6 *"}}})
	if err != nil {
		t.Fatal(err)
	}
	at := mustTime(t, "2026-01-01T00:00:00Z")
	for gaveUp := 0; ; gaveUp++ {
		next, ok := s.Next(at)
		if ok {
			if next.Format(time.RFC3339) != "2026-07-01T00:00:00Z" || gaveUp == 0 {
				t.Errorf("after %d give-ups: %s", gaveUp, next)
			}
			break
		}
		if next.IsZero() || !next.After(at) || gaveUp > 10 {
			t.Fatalf("give-up %d: %s after %s", gaveUp, next, at)
		}
		at = next
	}
}
