package schedule

import (
	"fmt"
	"strings"
	"time"
)

// Earliest and Latest bound every instant Orrery takes as input: a
// one-time schedule's at, and the times of API requests (a preview's from,
// a run listing's since and until). Earliest is the Unix epoch: nothing
// is scheduled before it, and it keeps the zero time.Time
// (0001-01-01T00:00:00Z) out. Latest is the last instant a protobuf
// Timestamp (and RFC 3339's four-digit year) can carry. Next never returns
// an instant after Latest.
var (
	Earliest = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	Latest   = time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)
)

// bounds names Earliest..Latest in messages.
const bounds = "1970-01-01T00:00:00Z..9999-12-31T23:59:59Z"

// CheckInstant reports an instant outside Earliest..Latest, with a message
// that names both bounds.
func CheckInstant(t time.Time) error {
	if outside(t) {
		return fmt.Errorf("%s is outside %s", t.UTC().Format(time.RFC3339Nano), bounds)
	}
	return nil
}

func outside(t time.Time) bool { return t.Before(Earliest) || t.After(Latest) }

// MaxGap is the longest wait between two fire days of a cron expression
// that Validate accepts: 8 years, so that 29 February (2096, then 2104)
// passes while 29 February on a Sunday (every 28 years) does not.
const MaxGap = 8 * 366 * 24 * time.Hour

// Validate parses spec as Parse does and also rejects what Parse accepts
// only so that stored jobs keep working: a one-time instant outside
// Earliest..Latest, a cron expression that never fires (30 February) or
// waits more than MaxGap between two fires, a start or end outside
// Earliest..Latest, jitter as long as the shortest wait between two
// instants, and exclusions that leave no instant among the first
// maxExcludedRun after start (or after sampleFrom). Every schedule that
// passes has a next instant from any point in time (until Latest or its
// end, and but for a stretch of exclusions longer than the sample).
// Errors are *Error, as Parse's.
func Validate(spec Spec) (*Schedule, error) {
	s, err := Parse(spec)
	if err != nil {
		return nil, err
	}
	if s.OneTime() {
		if outside(s.at) {
			if utc := s.at.Format(time.RFC3339Nano); utc != spec.At {
				return nil, errorf("at", "%q (%s) is outside %s", spec.At, utc, bounds)
			}
			return nil, errorf("at", "%q is outside %s", spec.At, bounds)
		}
		return s, nil
	}
	for i := range s.parts {
		if s.parts[i].civil == nil {
			continue
		}
		if msg := s.parts[i].checkFires(); msg != "" {
			return nil, errorf(spec.Cron.field(i), "%q %s", strings.TrimSpace(spec.Cron[i]), msg)
		}
	}
	for field, t := range map[string]time.Time{"start": s.start, "end": s.end} {
		if !t.IsZero() && outside(t) {
			return nil, errorf(field, "%s is outside %s", t.Format(time.RFC3339), bounds)
		}
	}
	from := sampleFrom
	if !s.start.IsZero() {
		from = s.start.Add(-time.Second)
	}
	if _, some := s.nextCandidate(from); some {
		if _, fires := s.Next(from); !fires {
			return nil, errorf("exclude", "excludes every instant: none fires in the first %d excluded stretches after %s", maxExcludedRun, from.Add(time.Second).Format(time.RFC3339))
		}
	}
	if s.jitter > 0 {
		if gap, before, ok := s.shortestGap(from); ok && s.jitter >= gap {
			where := ""
			if !before.IsZero() {
				where = ", before " + before.Format(time.RFC3339)
			}
			return nil, errorf("jitter", "%s is not shorter than the shortest wait between two instants (%s%s)", s.jitter, gap, where)
		}
	}
	return s, nil
}

// Validate samples a schedule's instants from its start or from
// sampleFrom: the first sampleInstants of them for jitter, the first
// maxExcludedRun (days at a time when a whole day is excluded) for
// exclusions.
var sampleFrom = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const sampleInstants = 10_000

// shortestGap is the shortest wait between two instants among the first
// sampleInstants after from (an @every expression: its interval at most),
// and the instant that ends it (zero for an @every interval).
func (s *Schedule) shortestGap(from time.Time) (time.Duration, time.Time, bool) {
	var gap time.Duration
	var before time.Time
	found := false
	for _, p := range s.parts {
		if p.every > 0 && (!found || p.every < gap) {
			gap, found = p.every, true
		}
	}
	prev, ok := s.Next(from)
	for i := 0; ok && i < sampleInstants; i++ {
		next, more := s.Next(prev)
		if !more {
			break
		}
		if d := next.Sub(prev); !found || d < gap {
			gap, before, found = d, next, true
		}
		prev = next
	}
	return gap, before, found
}

// The Gregorian calendar repeats every 400 years: 146,097 days, a whole
// number of weeks, so dates and weekdays fall the same way in every cycle.
const (
	cycleYears = 400
	cycleDays  = 146_097
	maxGapDays = int(MaxGap / (24 * time.Hour))
)

// checkFires looks at the day fields of a cron expression over a whole
// 400-year cycle, and returns why it never fires or fires too rarely ("" when
// it fires often enough). The time-of-day fields always hold a value
// (robfig/cron rejects an empty field), so a matching day always fires.
func (p *part) checkFires() string {
	c := p.civil
	for i, mask := range []uint64{c.Second, c.Minute, c.Hour} {
		if mask&^starBit == 0 {
			return fmt.Sprintf("never fires: its %s field matches nothing", fieldNames[i])
		}
	}
	// A year with a fire day keeps the wait under two years; only when some
	// year has none is it worth measuring every wait.
	yearsWith := 0
	forEachYear(func(year, start, firstWeekday int) {
		if p.firstDayOfYear(year, firstWeekday) >= 0 {
			yearsWith++
		}
	})
	switch {
	case yearsWith == cycleYears:
		return ""
	case yearsWith == 0:
		return fmt.Sprintf("never fires: no date in the calendar has %s", p.describeDays())
	}
	first, last, longest := -1, -1, 0
	forEachYear(func(year, start, firstWeekday int) {
		p.eachDayOfYear(year, firstWeekday, func(day int) {
			d := start + day
			if first < 0 {
				first = d
			} else {
				longest = max(longest, d-last)
			}
			last = d
		})
	})
	longest = max(longest, first+cycleDays-last) // from the last fire of a cycle to the first of the next
	if longest > maxGapDays {
		return fmt.Sprintf("fires too rarely: up to %.0f years pass between two fires (it needs %s); the limit is %d years",
			float64(longest)/365.2425, p.describeDays(), maxGapDays/366)
	}
	return ""
}

// describeDays names the day fields as robfig/cron parsed them.
func (p *part) describeDays() string {
	c := p.civil
	rule := "both day fields must match"
	if c.Dom&starBit == 0 && c.Dow&starBit == 0 {
		rule = "either day field may match"
	}
	return fmt.Sprintf("day-of-month %s in month %s with day-of-week %s (%s)",
		bits(c.Dom, 1, 31), bits(c.Month, 1, 12), bits(c.Dow, 0, 6), rule)
}

// forEachYear calls f for every year of one 400-year cycle (2000-2399) with
// the year's first day as a count of days from 2000-01-01 and its weekday
// (0 Sunday).
func forEachYear(f func(year, start, firstWeekday int)) {
	start, weekday := 0, int(time.Saturday) // 2000-01-01
	for year := 2000; year < 2000+cycleYears; year++ {
		f(year, start, weekday)
		n := 365
		if isLeap(year) {
			n = 366
		}
		start += n
		weekday = (weekday + n) % 7
	}
}

// firstDayOfYear is the day of the year (0-based) of the first fire day in
// year, or -1.
func (p *part) firstDayOfYear(year, firstWeekday int) int {
	found := -1
	p.days(year, firstWeekday, func(day int) bool { found = day; return false })
	return found
}

func (p *part) eachDayOfYear(year, firstWeekday int, f func(day int)) {
	p.days(year, firstWeekday, func(day int) bool { f(day); return true })
}

// days calls f with every fire day of year (0-based day of the year) until
// f returns false, matching days as Next does (Vixie cron: either day field
// when both are restricted, both otherwise).
func (p *part) days(year, firstWeekday int, f func(day int) bool) {
	c := p.civil
	either := c.Dom&starBit == 0 && c.Dow&starBit == 0
	day := 0
	for month := 1; month <= 12; month++ {
		n := daysIn(year, month)
		if c.Month&(1<<uint(month)) != 0 {
			for d := 1; d <= n; d++ {
				wd := (firstWeekday + day + d - 1) % 7
				dom, dow := c.Dom&(1<<uint(d)) != 0, c.Dow&(1<<uint(wd)) != 0
				if (either && (dom || dow)) || (!either && dom && dow) {
					if !f(day + d - 1) {
						return
					}
				}
			}
		}
		day += n
	}
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(year, month int) int {
	switch month {
	case 2:
		if isLeap(year) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// bits lists the values set in a robfig/cron field mask, "*" for all.
func bits(mask uint64, lo, hi int) string {
	var vals []string
	all := true
	for v := lo; v <= hi; v++ {
		if mask&(1<<uint(v)) != 0 {
			vals = append(vals, fmt.Sprint(v))
		} else {
			all = false
		}
	}
	if all {
		return "*"
	}
	return strings.Join(vals, ",")
}
