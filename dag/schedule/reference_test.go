package schedule

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// reference computes fire instants of a 5-field cron expression the slow,
// obvious way: walk every minute of real time, look at the wall clock, and
// apply the ISC rules by hand. It shares only field parsing with Next.
type reference struct {
	s       *Schedule
	loc     *time.Location
	wallish bool
}

func (r reference) matches(w time.Time) bool {
	c := r.s.parts[0].civil
	bit := func(mask uint64, v int) bool { return mask&(1<<uint(v)) != 0 }
	if !bit(c.Minute, w.Minute()) || !bit(c.Hour, w.Hour()) || !bit(c.Month, int(w.Month())) || w.Second() != 0 {
		return false
	}
	dom, dow := bit(c.Dom, w.Day()), bit(c.Dow, int(w.Weekday()))
	if c.Dom&starBit != 0 || c.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

func (r reference) wallAt(i time.Time) time.Time {
	l := i.In(r.loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC)
}

// seenBefore reports whether wall-clock time w already happened at an
// instant before i (the second pass through a fall-back overlap).
func (r reference) seenBefore(i, w time.Time) bool {
	for d := 15 * time.Minute; d <= 3*time.Hour; d += 15 * time.Minute {
		if r.wallAt(i.Add(-d)).Equal(w) {
			return true
		}
	}
	return false
}

func (r reference) between(from, until time.Time) []time.Time {
	var out []time.Time
	for i := from.Truncate(time.Minute).Add(time.Minute); i.Before(until); i = i.Add(time.Minute) {
		w, prev := r.wallAt(i), r.wallAt(i.Add(-time.Minute))
		fire := r.matches(w) && (r.wallish || !r.seenBefore(i, w))
		if !r.wallish && w.Sub(prev) > time.Minute {
			for m := prev.Add(time.Minute); m.Before(w); m = m.Add(time.Minute) {
				fire = fire || r.matches(m)
			}
		}
		if fire {
			out = append(out, i.UTC())
		}
	}
	return out
}

func TestNextAgainstMinuteByMinuteReference(t *testing.T) {
	zones := []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "Australia/Sydney",
		"America/Santiago", "America/Mexico_City", "Asia/Tehran", "Pacific/Apia", "UTC"}
	minutes := []string{"*", "*/15", "0", "30", "0,30", "5-10", "*/7", "45"}
	hours := []string{"*", "2", "1", "1-3", "*/2", "0,2", "3", "23"}
	doms := []string{"*", "*", "*", "1-7", "*/2", "15"}
	months := []string{"*", "*", "3,4", "10,11"}
	dows := []string{"*", "*", "*", "0", "1-5", "6"}
	// Instants near real transitions, 2022-2027, in the zones above.
	var transitions []time.Time
	for _, z := range zones {
		loc, _ := time.LoadLocation(z)
		for t0 := time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC); t0.Year() < 2028; {
			_, end := t0.In(loc).ZoneBounds()
			if end.IsZero() || end.Year() >= 2028 {
				break
			}
			transitions = append(transitions, end)
			t0 = end
		}
	}
	transitions = append(transitions, time.Date(2011, 12, 30, 10, 0, 0, 0, time.UTC)) // Samoa's skipped day

	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	const cases = 400
	for n := range cases {
		cron := strings.Join([]string{pick(minutes), pick(hours), pick(doms), pick(months), pick(dows)}, " ")
		zone := pick(zones)
		s, err := Parse(Spec{Cron: Crons(cron), Timezone: zone})
		if err != nil {
			t.Fatal(err)
		}
		from := transitions[rng.IntN(len(transitions))].Add(-time.Duration(rng.IntN(48*60)) * time.Minute)
		until := from.Add(72 * time.Hour)
		ref := reference{s: s, loc: s.loc, wallish: strings.Contains(cron[:strings.Index(cron, " ")], "*") || strings.Contains(strings.Fields(cron)[1], "*")}
		want := ref.between(from, until)
		var got []time.Time
		for at := from; ; {
			next, ok := s.Next(at)
			if !ok || !next.Before(until) {
				break
			}
			got = append(got, next)
			at = next
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("case %d: %q in %s from %s:\n got %v\nwant %v", n, cron, zone, from.Format(time.RFC3339), got, want)
		}
	}
}
