package schedule

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func instants(t *testing.T, s *Schedule, from string, n int) []string {
	t.Helper()
	var out []string
	for _, at := range s.Upcoming(mustTime(t, from), n) {
		out = append(out, at.Format(time.RFC3339))
	}
	return out
}

func mustParse(t *testing.T, spec Spec) *Schedule {
	t.Helper()
	s, err := Validate(spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCronListIsTheUnionEachInstantOnce(t *testing.T) {
	// Berlin in December is UTC+1: 09:00 is 08:00Z. 2026-12-05 is a Saturday.
	s := mustParse(t, Spec{Cron: Crons("0 9 * * 1-5", "0 12 * * 6", "0 9 * * 1"), Timezone: "Europe/Berlin"})
	got := instants(t, s, "2026-12-03T12:00:00Z", 4)
	want := []string{"2026-12-04T08:00:00Z", "2026-12-05T11:00:00Z", "2026-12-07T08:00:00Z", "2026-12-08T08:00:00Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestStartAndEndBoundTheInstants(t *testing.T) {
	s := mustParse(t, Spec{Cron: Crons("0 9 * * *"), Start: "2026-12-01T09:00:00Z", End: "2026-12-03T09:00:00Z"})
	got := instants(t, s, "2026-11-01T00:00:00Z", 10)
	want := []string{"2026-12-01T09:00:00Z", "2026-12-02T09:00:00Z", "2026-12-03T09:00:00Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v (start and end are inclusive)", got, want)
	}
}

func TestExclusionsInTheJobsZone(t *testing.T) {
	// Midnight in Berlin is 23:00Z the day before: the excluded local date
	// 2026-12-24 removes the instant 2026-12-23T23:00:00Z.
	s := mustParse(t, Spec{Cron: Crons("0 0 * * *"), Timezone: "Europe/Berlin",
		Exclude: &Exclude{Dates: []string{"2026-12-24", "2026-12-25"}, Cron: []string{"* * 1 1 *"}}})
	got := instants(t, s, "2026-12-22T12:00:00Z", 4)
	want := []string{"2026-12-22T23:00:00Z", "2026-12-25T23:00:00Z", "2026-12-26T23:00:00Z", "2026-12-27T23:00:00Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}
	plan := s.Plan(mustTime(t, "2026-12-22T12:00:00Z"), 2)
	if len(plan) != 4 || plan[1].Excluded != "excluded by exclude.dates (2026-12-24)" || !plan[1].Fire.IsZero() || plan[3].Excluded != "" {
		t.Errorf("plan: %+v", plan)
	}
	// An hourly job excluded on New Year's Day (a window that names whole
	// days is passed a day at a time).
	h := mustParse(t, Spec{Cron: Crons("0 * * * *"), Timezone: "Europe/Berlin", Exclude: &Exclude{Cron: []string{"* * 1 1 *"}}})
	if got := instants(t, h, "2026-12-31T22:00:00Z", 2); strings.Join(got, " ") != "2027-01-01T23:00:00Z 2027-01-02T00:00:00Z" {
		t.Errorf("hourly past New Year's Day: got %v", got)
	}
	if why := h.Excluded(mustTime(t, "2027-01-01T12:00:00Z")); why != `excluded by exclude.cron[0] "* * 1 1 *"` {
		t.Errorf("reason: %q", why)
	}
	// A window inside the day: 5 fields exclude every second of the minutes they match.
	m := mustParse(t, Spec{Cron: Crons("*/20 * * * * *"), Exclude: &Exclude{Cron: []string{"0-1 12 * * *"}}})
	if got := instants(t, m, "2026-12-01T11:59:30Z", 3); strings.Join(got, " ") != "2026-12-01T11:59:40Z 2026-12-01T12:02:00Z 2026-12-01T12:02:20Z" {
		t.Errorf("minute window: got %v", got)
	}
}

func TestExcludedDateAcrossADSTChange(t *testing.T) {
	// New York springs forward on 2026-03-08: 02:30 fires at 03:00 EDT
	// (07:00Z) that day; excluding the day removes that instant, and the
	// next day's fires as usual.
	s := mustParse(t, Spec{Cron: Crons("30 2 * * *"), Timezone: "America/New_York", Exclude: &Exclude{Dates: []string{"2026-03-08"}}})
	if got := instants(t, s, "2026-03-07T12:00:00Z", 1); got[0] != "2026-03-09T06:30:00Z" {
		t.Errorf("got %v", got)
	}
}

func TestJitterIsDeterministicBoundedAndInvertible(t *testing.T) {
	spec := Spec{Cron: Crons("0 * * * *"), Jitter: D(10 * time.Minute)}
	s := mustParse(t, spec)
	a, b := s.For("default", "a"), s.For("default", "b")
	differ := false
	for _, at := range s.Upcoming(mustTime(t, "2026-12-01T00:00:00Z"), 48) {
		oa, ob := a.Offset(at), b.Offset(at)
		if oa < 0 || oa >= 10*time.Minute || oa%time.Second != 0 {
			t.Fatalf("offset %s outside [0, 10m) in whole seconds", oa)
		}
		if again := s.For("default", "a").Offset(at); again != oa {
			t.Fatalf("offset of one job and instant changed: %s then %s", oa, again)
		}
		if got := a.InstantOf(a.Fire(at)); !got.Equal(at) {
			t.Fatalf("InstantOf(Fire(%s)) = %s", at, got)
		}
		differ = differ || oa != ob
	}
	if !differ {
		t.Error("two jobs drew the same 48 offsets")
	}
	// A jitter longer than the gap (Parse accepts it; Validate does not) is
	// capped short of the next instant: fire times keep the instants' order.
	wide, err := Parse(Spec{Cron: Crons("0 * * * *"), Jitter: D(5 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	wide = wide.For("default", "wide")
	prev := time.Time{}
	for _, at := range wide.Upcoming(mustTime(t, "2026-12-01T00:00:00Z"), 100) {
		if f := wide.Fire(at); !f.After(prev) || f.Sub(at) >= time.Hour {
			t.Fatalf("fire %s of %s: out of order or past the next instant", f, at)
		} else {
			prev = f
		}
	}
}

func TestScheduleFieldErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		spec  Spec
		field string
		msg   string
	}{
		{"end before start", Spec{Cron: Crons("@daily"), Start: "2026-12-02T00:00:00Z", End: "2026-12-01T00:00:00Z"}, "end", "is not after start"},
		{"bad start", Spec{Cron: Crons("@daily"), Start: "tomorrow"}, "start", "not an RFC 3339 instant"},
		{"jitter as long as the interval", Spec{Cron: Crons("*/5 * * * *"), Jitter: D(5 * time.Minute)}, "jitter", "not shorter than the shortest wait between two instants (5m0s, before"},
		{"jitter of a union", Spec{Cron: Crons("0 9 * * *", "1 9 * * *"), Jitter: D(2 * time.Minute)}, "jitter", "(1m0s, before 2026-01-01T09:01:00Z)"},
		{"negative jitter", Spec{Cron: Crons("@daily"), Jitter: D(-time.Second)}, "jitter", "outside"},
		{"excludes every instant", Spec{Cron: Crons("0 9 * * *"), Exclude: &Exclude{Cron: []string{"* 9 * * *"}}}, "exclude", "excludes every instant"},
		{"bad date", Spec{Cron: Crons("@daily"), Exclude: &Exclude{Dates: []string{"2026-12-24", "24.12.2026"}}}, "exclude.dates[1]", "not a date"},
		{"bad exclusion", Spec{Cron: Crons("@daily"), Exclude: &Exclude{Cron: []string{"61 * * * *"}}}, "exclude.cron[0]", "minute field"},
		{"every in exclusion", Spec{Cron: Crons("@daily"), Exclude: &Exclude{Cron: []string{"@every 1h"}}}, "exclude.cron[0]", "@every"},
		{"second of a list", Spec{Cron: Crons("@daily", "0 0 30 2 *")}, "cron[1]", "never fires"},
		{"empty in a list", Spec{Cron: Crons("@daily", " ")}, "cron[1]", "empty"},
		{"too many", Spec{Cron: make(CronList, MaxCrons+1)}, "cron", "limit"},
		{"start on a one-time", Spec{At: "2026-12-01T00:00:00Z", Start: "2026-12-01T00:00:00Z"}, "start", "cron schedules only"},
		{"catchup window", Spec{Cron: Crons("@daily"), CatchupWindow: D(0)}, "catchup_window", "outside 1s"},
		{"after without a job", Spec{After: &After{}}, "after.job", "name the upstream job"},
		{"after an outcome that is none", Spec{After: &After{Job: "up", On: []string{"succeeded", "done"}}}, "after.on[1]", `"done" is not one of succeeded, failed, dead_lettered, cancelled`},
		{"after an outcome twice", Spec{Cron: Crons("@daily"), After: &After{Job: "up", On: []string{"failed", "failed"}}}, "after.on[1]", "listed twice"},
		{"after alone with a zone", Spec{Timezone: "Europe/Berlin", After: &After{Job: "up"}}, "timezone", "after or event alone has no instants"},
		{"after beside at, bad", Spec{At: "2026-12-01T00:00:00Z", After: &After{Job: "up", On: []string{"x"}}}, "after.on[0]", "not one of"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "too many" {
				for i := range c.spec.Cron {
					c.spec.Cron[i] = "@daily"
				}
			}
			_, err := Validate(c.spec)
			se, ok := err.(*Error)
			if !ok || se.Field != c.field || !strings.Contains(se.Message, c.msg) {
				t.Errorf("got %v, want %s: ...%s...", err, c.field, c.msg)
			}
		})
	}
}

func TestCronListReadsAStringOrAList(t *testing.T) {
	var one, many struct{ Cron CronList }
	if err := yaml.Unmarshal([]byte("cron: 0 9 * * *\n"), &one); err != nil || len(one.Cron) != 1 {
		t.Fatalf("%v %v", one, err)
	}
	if err := yaml.Unmarshal([]byte("cron: [\"0 9 * * 1-5\", \"0 12 * * 6\"]\n"), &many); err != nil || len(many.Cron) != 2 {
		t.Fatalf("%v %v", many, err)
	}
	b, _ := json.Marshal(Spec{Cron: Crons("@daily")})
	if string(b) != `{"cron":"@daily"}` {
		t.Errorf("one expression written as %s", b)
	}
	var back Spec
	if err := json.Unmarshal([]byte(`{"cron":["@daily","@hourly"]}`), &back); err != nil || len(back.Cron) != 2 {
		t.Errorf("%v %v", back, err)
	}
}

func TestDSTWarnings(t *testing.T) {
	from := mustTime(t, "2027-01-01T00:00:00Z")
	for _, c := range []struct {
		spec Spec
		want []string
	}{
		{Spec{Cron: Crons("30 2 * * *"), Timezone: "America/New_York"},
			[]string{"cron: on 2027-03-14 the clocks in America/New_York skip 02:00-03:00: 02:30:00 does not exist that day, and Orrery fires it once at 03:00 EDT"}},
		{Spec{Cron: Crons("0 9 * * *", "30 1 * * *"), Timezone: "America/New_York"},
			[]string{"cron[1]: on 2027-11-07 the clocks in America/New_York go back and 01:00-02:00 happens twice: Orrery fires 01:30:00 once, at its first occurrence (EDT"}},
		{Spec{Cron: Crons("*/30 * * * *"), Timezone: "Europe/Berlin"},
			[]string{"cron: on 2027-03-28 the clocks in Europe/Berlin skip 02:00-03:00: the times it names in that hour (from 02:00:00) do not exist",
				"cron: on 2027-10-31 the clocks in Europe/Berlin go back and 02:00-03:00 happens twice: the times it names in that hour (from 02:00:00) fire twice, CEST then CET"}},
		{Spec{Cron: Crons("0 9 * * *"), Timezone: "America/New_York"}, nil},
		{Spec{Cron: Crons("30 2 * * *")}, nil},
	} {
		s := mustParse(t, c.spec)
		var got []string
		for _, w := range s.DSTWarnings(c.spec, from, 365*24*time.Hour) {
			got = append(got, w.Field+": "+w.Message)
		}
		if len(got) != len(c.want) {
			t.Errorf("%v: got %q, want %d", c.spec.Cron, got, len(c.want))
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.want[i]) {
				t.Errorf("%v:\ngot  %s\nwant %s...", c.spec.Cron, got[i], c.want[i])
			}
		}
	}
}

// @every counts from start: start itself first, then every interval.
func TestEveryCountsFromStart(t *testing.T) {
	s := mustParse(t, Spec{Cron: Crons("@every 1h"), Start: "2026-12-01T00:00:00Z"})
	if got := instants(t, s, "2026-11-01T00:00:00Z", 2); strings.Join(got, " ") != "2026-12-01T00:00:00Z 2026-12-01T01:00:00Z" {
		t.Errorf("got %v", got)
	}
}
