package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Validate rejects, naming the field and the reason, what Parse lets
// through for stored jobs' sake: instants out of range and cron
// expressions that never fire or fire too rarely. Rare but real schedules
// (29 February) pass.
func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		spec      Spec
		wantField string // "" means valid
		wantIn    string
	}{
		{"zero time", Spec{At: "0001-01-01T00:00:00Z"}, "at", "outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z"},
		{"zero time with offset", Spec{At: "0001-01-01T01:00:00+01:00"}, "at", "outside"},
		{"year zero", Spec{At: "0000-01-01T00:00:00Z"}, "at", "outside"},
		{"before the epoch", Spec{At: "1969-12-31T23:59:59Z"}, "at", "outside"},
		{"past 9999 by its offset", Spec{At: "9999-12-31T23:59:59-01:00"}, "at", "outside"},
		{"the epoch", Spec{At: "1970-01-01T00:00:00Z"}, "", ""},
		{"the last second", Spec{At: "9999-12-31T23:59:59Z"}, "", ""},
		{"past is fine", Spec{At: "2001-09-09T01:46:40Z"}, "", ""},

		{"30 February", Spec{Cron: Crons("0 0 30 2 *")}, "cron", "never fires"},
		{"31 February", Spec{Cron: Crons("0 0 31 2 *")}, "cron", "never fires: no date in the calendar has day-of-month 31 in month 2"},
		{"31 April, June, September, November", Spec{Cron: Crons("0 0 31 4,6,9,11 *")}, "cron", "never fires"},
		{"31 February with seconds and a zone", Spec{Cron: Crons("0 0 0 31 2 *"), Timezone: "Europe/Paris"}, "cron", "never fires"},
		{"stepped day-of-month 30-31 in February", Spec{Cron: Crons("0 0 30/1 2 *")}, "cron", "never fires"},
		{"29 February on a Sunday: every 28 years", Spec{Cron: Crons("0 0 29 2 */7")}, "cron", "fires too rarely"},
		{"1 February on a Monday with a stepped day: up to 11 years", Spec{Cron: Crons("0 0 */29 2 1")}, "cron", "fires too rarely"},

		{"29 February", Spec{Cron: Crons("0 0 29 2 *")}, "", ""},
		{"29 February in a zone", Spec{Cron: Crons("30 2 29 2 *"), Timezone: "America/New_York"}, "", ""},
		{"29 February or any Monday in February (Vixie OR)", Spec{Cron: Crons("0 0 29 2 1")}, "", ""},
		{"31 February or any Friday (Vixie OR)", Spec{Cron: Crons("0 0 31 2 5")}, "", ""},
		{"Friday the 13th in February via OR", Spec{Cron: Crons("0 0 13 2 5")}, "", ""},
		{"stepped day and weekday", Spec{Cron: Crons("0 0 */2 * 1")}, "", ""},
		{"31st of long months", Spec{Cron: Crons("0 0 31 * *")}, "", ""},
		{"30 February or 31 January", Spec{Cron: Crons("0 0 30,31 1,2 *")}, "", ""},
		{"yearly", Spec{Cron: Crons("@yearly")}, "", ""},
		{"every", Spec{Cron: Crons("@every 1h")}, "", ""},
		{"last day of the week in December", Spec{Cron: Crons("59 23 25-31 12 6")}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Validate(tt.spec)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want valid", tt.spec, err)
				}
				return
			}
			var se *Error
			if !errors.As(err, &se) || se.Field != tt.wantField || !strings.Contains(se.Message, tt.wantIn) {
				t.Fatalf("Validate(%+v) = %v, want field %q mentioning %q", tt.spec, err, tt.wantField, tt.wantIn)
			}
			if _, perr := Parse(tt.spec); perr != nil {
				t.Fatalf("Parse(%+v) = %v: stored jobs must still parse", tt.spec, perr)
			}
		})
	}
}

// Every cron expression that Validate accepts has a next instant from any
// starting point, as the scheduler needs: Next looks at least MaxGap ahead,
// past robfig/cron's own five-year limit. 29 February waits 8 years across
// 2100.
func TestValidatedCronAlwaysHasANextInstant(t *testing.T) {
	for _, expr := range []string{"0 0 29 2 *", "0 0 29 2 1", "0 0 13 2 5", "0 12 31 12 *", "59 23 25-31 12 6"} {
		for _, zone := range []string{"UTC", "America/New_York", "Australia/Lord_Howe"} {
			s, err := Validate(Spec{Cron: Crons(expr), Timezone: zone})
			if err != nil {
				t.Fatalf("%q: %v", expr, err)
			}
			for year := 1970; year < 2420; year += 3 {
				from := time.Date(year, 3, 1, 0, 0, 0, 0, time.UTC)
				if _, ok := s.Next(from); !ok {
					t.Fatalf("%q in %s: no instant after %s", expr, zone, from.Format(time.RFC3339))
				}
			}
		}
	}
	s, _ := Validate(Spec{Cron: Crons("0 0 29 2 *")})
	if got, ok := s.Next(time.Date(2096, 3, 1, 0, 0, 0, 0, time.UTC)); !ok || !got.Equal(time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("29 February after 2096: %s %v, want 2104-02-29", got, ok)
	}
}

// A one-time schedule at the zero time (which Parse keeps accepting for
// stored jobs) is still one-time: nothing dereferences a missing cron.
func TestZeroTimeIsStillOneTime(t *testing.T) {
	s, err := Parse(Spec{At: "0001-01-01T00:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.OneTime() || !s.At().IsZero() {
		t.Fatalf("OneTime %v, At %s", s.OneTime(), s.At())
	}
	if _, ok := s.Next(time.Time{}); ok {
		t.Fatal("the zero instant is not after itself")
	}
	if got, ok := s.CatchUp(1, s.At(), time.Now()); !ok || !got.IsZero() {
		t.Fatalf("CatchUp = %s %v", got, ok)
	}
	if got := s.Upcoming(time.Date(1, 1, 1, 0, 0, -1, 0, time.UTC), 3); len(got) != 1 {
		t.Fatalf("Upcoming = %v", got)
	}
}

// Nothing past Latest comes out of Next, so every instant Orrery returns
// fits a protobuf Timestamp.
func TestNextStopsAtLatest(t *testing.T) {
	for _, expr := range []string{"* * * * *", "@every 1s", "@every 2562047h", "0 0 29 2 *"} {
		s, err := Validate(Spec{Cron: Crons(expr)})
		if err != nil {
			t.Fatal(err)
		}
		for _, from := range []time.Time{Latest.Add(-time.Minute), Latest, Latest.Add(time.Hour), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)} {
			if got, ok := s.Next(from); ok && got.After(Latest) {
				t.Fatalf("%q after %s: %s is past Latest", expr, from, got)
			}
		}
	}
}

// CatchUp terminates when the pending instant is centuries old.
func TestCatchUpCenturiesLate(t *testing.T) {
	s, _ := Parse(Spec{Cron: Crons("0 0 1 1 *")})
	got, ok := s.CatchUp(1000, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	if !ok || got.Year() < 1000 {
		t.Fatalf("CatchUp = %s %v", got, ok)
	}
}

func TestCheckInstant(t *testing.T) {
	for _, tt := range []struct {
		t  time.Time
		ok bool
	}{
		{time.Time{}, false},
		{Earliest.Add(-time.Nanosecond), false},
		{Earliest, true},
		{Latest, true},
		{Latest.Add(time.Nanosecond), false},
		{time.Unix(1<<40, 0), false},
	} {
		if err := CheckInstant(tt.t); (err == nil) != tt.ok {
			t.Errorf("CheckInstant(%s) = %v", tt.t, err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	for _, expr := range []string{"0 2 * * *", "0 0 29 2 *", "0 0 31 2 *", "0 0 29 2 */7"} {
		b.Run(expr, func(b *testing.B) {
			for b.Loop() {
				_, _ = Validate(Spec{Cron: Crons(expr)})
			}
		})
	}
}
