package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestUpcomingVectors(t *testing.T) {
	tests := []struct {
		name string
		cron string
		zone string
		from string
		want []string
	}{
		// America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
		{"ny fixed in gap fires at gap end", "30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"ny fixed times coalesce at gap end", "0 2,3 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z", "2026-03-09T07:00:00Z"}},
		{"ny fixed in overlap fires once", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"ny stepped minute skips the gap", "*/30 * * * *", "America/New_York", "2026-03-08T06:00:00Z",
			[]string{"2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
		{"ny stepped minute repeats the overlap", "*/30 * * * *", "America/New_York", "2026-11-01T05:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:00:00Z"}},
		{"ny hourly repeats the overlap", "@hourly", "America/New_York", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{"ny star hour fixed minute in gap does not exist", "15 * * * *", "America/New_York", "2026-03-08T06:00:00Z",
			[]string{"2026-03-08T06:15:00Z", "2026-03-08T07:15:00Z"}},
		{"ny seconds field in gap", "30 30 2 * * *", "America/New_York", "2027-03-13T12:00:00Z",
			[]string{"2027-03-14T07:00:00Z", "2027-03-15T06:30:30Z"}},
		{"ny daily 2027 fall back", "@daily", "America/New_York", "2027-11-06T12:00:00Z",
			[]string{"2027-11-07T04:00:00Z", "2027-11-08T05:00:00Z"}},

		// Europe/London: 2026-03-29 01:00 GMT -> 02:00 BST; 2026-10-25 02:00 BST -> 01:00 GMT.
		{"london fixed in gap", "30 1 * * *", "Europe/London", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"london fixed in overlap", "30 1 * * *", "Europe/London", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"london every minute across fall back", "* 1 * * *", "Europe/London", "2027-10-31T00:58:00Z",
			[]string{"2027-10-31T00:59:00Z", "2027-10-31T01:00:00Z", "2027-10-31T01:01:00Z"}},

		// Australia/Lord_Howe shifts by 30 minutes: 2026-04-05 02:00 (+11) -> 01:30 (+10:30);
		// 2026-10-04 02:00 (+10:30) -> 02:30 (+11).
		{"lord howe fixed in 30-minute gap", "15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z",
			[]string{"2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"}},
		{"lord howe fixed in 30-minute overlap", "45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z",
			[]string{"2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
		{"lord howe stepped minute repeats the overlap", "*/15 * * * *", "Australia/Lord_Howe", "2026-04-04T14:40:00Z",
			[]string{"2026-04-04T14:45:00Z", "2026-04-04T15:00:00Z", "2026-04-04T15:15:00Z", "2026-04-04T15:30:00Z"}},

		// Australia/Sydney, southern hemisphere: 2027-04-04 03:00 AEDT -> 02:00 AEST.
		{"sydney fixed in overlap", "30 2 * * *", "Australia/Sydney", "2027-04-03T00:00:00Z",
			[]string{"2027-04-03T15:30:00Z", "2027-04-04T16:30:00Z"}},

		// Zones that changed their rules.
		{"mexico city dropped DST after 2022: no gap in 2023", "30 2 * * *", "America/Mexico_City", "2023-04-01T12:00:00Z",
			[]string{"2023-04-02T08:30:00Z", "2023-04-03T08:30:00Z"}},
		{"mexico city last fall back", "30 1 * * *", "America/Mexico_City", "2022-10-29T12:00:00Z",
			[]string{"2022-10-30T06:30:00Z", "2022-10-31T07:30:00Z"}},
		{"samoa skipped 30 December 2011", "0 12 * * *", "Pacific/Apia", "2011-12-29T12:00:00Z",
			[]string{"2011-12-29T22:00:00Z", "2011-12-30T10:00:00Z", "2011-12-30T22:00:00Z"}},

		// Other forms.
		{"utc six fields", "*/20 * * * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
		{"every is elapsed time", "@every 90s", "America/New_York", "2026-11-01T05:59:00Z",
			[]string{"2026-11-01T06:00:30Z", "2026-11-01T06:02:00Z"}},
		{"vixie OR of restricted day fields", "0 0 13 * 5", "", "2026-02-01T00:00:00Z",
			[]string{"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-06T00:00:00Z"}},
		{"vixie AND when day of month starts with star", "0 0 */2 * 1", "", "2026-06-01T00:00:00Z",
			[]string{"2026-06-15T00:00:00Z", "2026-06-29T00:00:00Z", "2026-07-13T00:00:00Z"}},
		{"weekly descriptor", "@weekly", "Europe/London", "2026-03-25T00:00:00Z",
			[]string{"2026-03-29T00:00:00Z", "2026-04-04T23:00:00Z"}},
		{"leap day", "0 0 29 2 *", "", "2026-01-01T00:00:00Z",
			[]string{"2028-02-29T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(Spec{Cron: Crons(tt.cron), Timezone: tt.zone})
			if err != nil {
				t.Fatal(err)
			}
			got := s.Upcoming(mustTime(t, tt.from), len(tt.want))
			var gotS []string
			for _, g := range got {
				gotS = append(gotS, g.Format(time.RFC3339))
			}
			if strings.Join(gotS, " ") != strings.Join(tt.want, " ") {
				t.Errorf("Upcoming(%q in %q from %s)\n got %v\nwant %v", tt.cron, tt.zone, tt.from, gotS, tt.want)
			}
		})
	}
}

func TestOneTime(t *testing.T) {
	s, err := Parse(Spec{At: "2026-12-31T23:59:59+01:00"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Upcoming(mustTime(t, "2026-01-01T00:00:00Z"), 3); len(got) != 1 || !got[0].Equal(mustTime(t, "2026-12-31T22:59:59Z")) {
		t.Fatalf("got %v", got)
	}
	if _, ok := s.Next(mustTime(t, "2026-12-31T22:59:59Z")); ok {
		t.Fatal("a one-time schedule fired after its instant")
	}
}

func TestNeverMatches(t *testing.T) {
	s, err := Parse(Spec{Cron: Crons("0 0 30 2 *")})
	if err != nil {
		t.Fatal(err)
	}
	if next, ok := s.Next(mustTime(t, "2026-01-01T00:00:00Z")); ok {
		t.Fatalf("30 February fired at %s", next)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name      string
		spec      Spec
		wantField string
		wantIn    string
	}{
		{"minute out of range", Spec{Cron: Crons("61 * * * *")}, "cron", "minute field"},
		{"hour out of range", Spec{Cron: Crons("0 24 * * *")}, "cron", "hour field"},
		{"seconds out of range", Spec{Cron: Crons("60 0 * * * *")}, "cron", "seconds field"},
		{"bad day of week", Spec{Cron: Crons("0 0 * * funday")}, "cron", "day-of-week field"},
		{"bad month", Spec{Cron: Crons("0 0 1 13 *")}, "cron", "month field"},
		{"too few fields", Spec{Cron: Crons("0 0 *")}, "cron", "3 fields"},
		{"too many fields", Spec{Cron: Crons("0 0 0 * * * *")}, "cron", "7 fields"},
		{"unknown descriptor", Spec{Cron: Crons("@fortnightly")}, "cron", "unknown descriptor"},
		{"every without duration", Spec{Cron: Crons("@every")}, "cron", "@every needs a duration"},
		{"every below a second", Spec{Cron: Crons("@every 10ms")}, "cron", "at least 1s"},
		{"tz prefix", Spec{Cron: Crons("TZ=UTC 0 0 * * *")}, "cron", "timezone"},
		{"unknown zone", Spec{Cron: Crons("0 0 * * *"), Timezone: "Mars/Olympus"}, "timezone", "Mars/Olympus"},
		{"local zone", Spec{Cron: Crons("0 0 * * *"), Timezone: "Local"}, "timezone", "IANA"},
		{"at not rfc3339", Spec{At: "tomorrow"}, "at", "RFC 3339"},
		{"at without offset", Spec{At: "2026-12-31T23:59:59"}, "at", "RFC 3339"},
		{"both", Spec{Cron: Crons("0 0 * * *"), At: "2026-12-31T23:59:59Z"}, "at", "not both"},
		{"neither", Spec{}, "cron", "needs cron, at, after or event"},
		{"at with zone", Spec{At: "2026-12-31T23:59:59Z", Timezone: "UTC"}, "timezone", "cron only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.spec)
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%+v) = %v, want *Error", tt.spec, err)
			}
			if se.Field != tt.wantField || !strings.Contains(se.Error(), tt.wantIn) {
				t.Fatalf("Parse(%+v) = %q (field %q), want field %q mentioning %q", tt.spec, se, se.Field, tt.wantField, tt.wantIn)
			}
		})
	}
}
