package schedule

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Past the end of a zone's table, in leap years, Go's ZoneBounds reports a
// period that does not hold the instant (31 December 2048 in New York), on
// which Next used to loop forever. Next agrees with the minute-by-minute
// reference there, and finds a yearly instant across it.
func TestNextAcrossLeapYearEndPastTheZoneTable(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Asia/Tehran"} {
		for _, cron := range []string{"0 0 * * *", "30 1 * * *", "*/30 * * * *", "0 0 1 1 *", "0 12 31 12 *"} {
			s, err := Validate(Spec{Cron: Crons(cron), Timezone: zone})
			if err != nil {
				t.Fatal(err)
			}
			from := time.Date(2048, 12, 29, 0, 0, 0, 0, time.UTC)
			until := from.Add(96 * time.Hour)
			fields := strings.Fields(cron)
			ref := reference{s: s, loc: s.loc, wallish: strings.Contains(fields[0], "*") || strings.Contains(fields[1], "*")}
			want := ref.between(from, until)
			var got []time.Time
			done := make(chan struct{})
			go func() {
				defer close(done)
				for at := from; ; {
					next, ok := s.Next(at)
					if !ok || !next.Before(until) {
						return
					}
					got = append(got, next)
					at = next
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%q in %s: Next did not return", cron, zone)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%q in %s:\n got %v\nwant %v", cron, zone, got, want)
			}
		}
	}
	s, _ := Validate(Spec{Cron: Crons("0 0 1 1 *"), Timezone: "America/New_York"})
	if got, ok := s.Next(time.Date(2048, 12, 30, 0, 0, 0, 0, time.UTC)); !ok || got.Format(time.RFC3339) != "2049-01-01T05:00:00Z" {
		t.Fatalf("new year 2049 in New York: %s %v", got, ok)
	}
}

// zoneBounds always holds its instant, wherever Go's ZoneBounds does not.
func TestZoneBoundsHoldTheInstant(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Asia/Tehran", "Australia/Lord_Howe", "UTC"} {
		loc, _ := time.LoadLocation(zone)
		for at := time.Date(2048, 12, 25, 0, 0, 0, 0, time.UTC); at.Year() < 2050; at = at.Add(7 * time.Hour) {
			start, end := zoneBounds(at, loc)
			if start.After(at) || (!end.IsZero() && !end.After(at)) {
				t.Fatalf("%s: zoneBounds(%s) = %s, %s", zone, at, start, end)
			}
			_, off := at.In(loc).Zone()
			for _, u := range []time.Time{start, end.Add(-time.Second)} {
				if u.IsZero() || u.Year() < 2000 {
					continue
				}
				if _, o := u.In(loc).Zone(); o != off {
					t.Fatalf("%s: offset at %s is %d, at %s %d", zone, u, o, at, off)
				}
			}
		}
	}
}
