package schedule

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"time"
)

// horizon bounds the search for the next instant of a cron expression that
// matches rarely (or never, such as 30 February): the longest wait between
// two fire days that Validate accepts (MaxGap, 8 years: 29 February waits
// that long across 2100), plus two days for the time of day and the zone's
// offset.
const horizon = MaxGap + 2*24*time.Hour

// Next returns the first instant of the schedule strictly after after, in
// UTC, and false when there is none: a one-time schedule already past, a
// cron schedule past its end, whose expressions match no date within the
// horizon (MaxGap, 8 years, and two days), or whose exclusions removed
// more than maxExcludedRun instants in a row, or an instant past Latest
// (9999-12-31T23:59:59.999999999Z). The instants of a cron schedule are the
// union of its expressions' (each once), at or after start and at or
// before end, less the excluded ones. An instant fires at Fire(instant),
// later by its jitter.
//
// When it gives up on a run of exclusions, Next returns the excluded
// instant it stopped at with false (a zero time otherwise): not an
// instant to fire, but where a later search goes on (the scheduler keeps
// it as the job's next wake-up rather than ending the job).
func (s *Schedule) Next(after time.Time) (time.Time, bool) {
	if s.OneTime() {
		if s.at.After(after) && !s.at.After(Latest) {
			return s.at, true
		}
		return time.Time{}, false
	}
	for skipped := 0; ; skipped++ {
		next, ok := s.nextCandidate(after)
		if !ok {
			return time.Time{}, false
		}
		why, until := s.excluded(next)
		if why == "" {
			return next, true
		}
		if skipped == maxExcludedRun {
			return next, false
		}
		after = next
		if until.After(after) {
			if d := s.shortestEvery(); d > 0 {
				// An @every expression counts from the instant before: leave
				// the excluded stretch by whole intervals.
				after = next.Add(until.Sub(next) / d * d)
			} else {
				after = until
			}
		}
	}
}

// maxExcludedRun bounds how many excluded stretches in a row Next passes
// over: an exclusion is passed a stretch at a time (a whole day, or the
// run of seconds, minutes or hours its expression matches; excluded.
// Validate refuses a schedule whose exclusions leave none of the first
// ones it samples.
const maxExcludedRun = 100_000

// nextCandidate is the first instant of the union of the expressions
// after after, within start and end, excluded or not.
func (s *Schedule) nextCandidate(after time.Time) (time.Time, bool) {
	if !s.start.IsZero() && after.Before(s.start) {
		after = s.start.Add(-time.Nanosecond) // the parts truncate to whole seconds: start itself may fire
	}
	var best time.Time
	found := false
	for i := range s.parts {
		next, ok := s.parts[i].next(s.loc, after)
		if p := &s.parts[i]; p.every > 0 && !s.start.IsZero() && after.Before(s.start) {
			// @every counts from start, whole seconds: start itself first.
			next, ok = s.start.Add(time.Second-time.Nanosecond).Truncate(time.Second), true
		}
		if ok && (!found || next.Before(best)) {
			best, found = next, true
		}
	}
	if !found || best.After(Latest) || (!s.end.IsZero() && best.After(s.end)) {
		return time.Time{}, false
	}
	return best, true
}

func (s *Schedule) civilOnly() bool { return s.shortestEvery() == 0 }

// shortestEvery is the shortest interval of the schedule's @every
// expressions (0 for none): the union's next instant after any instant t
// is at most t plus it.
func (s *Schedule) shortestEvery() time.Duration {
	var d time.Duration
	for _, p := range s.parts {
		if p.every > 0 && (d == 0 || p.every < d) {
			d = p.every
		}
	}
	return d
}

// Excluded says why the instant t is excluded ("" when it is not).
func (s *Schedule) Excluded(t time.Time) string {
	why, _ := s.excluded(t)
	return why
}

// excluded says why t is excluded, and the last instant of the excluded
// stretch it knows t is in (t itself when it knows no more): the whole day
// for exclude.dates and for an expression matching every time of day,
// else the run of seconds, minutes or hours its expression matches
// (exclusion.stretchEnd), within the zone's current UTC offset.
func (s *Schedule) excluded(t time.Time) (string, time.Time) {
	if len(s.exDates) == 0 && len(s.exCrons) == 0 {
		return "", t
	}
	local := t.In(s.loc)
	y, m, d := local.Date()
	endOfDay := time.Date(y, m, d+1, 0, 0, 0, 0, s.loc).Add(-time.Second)
	if s.exDates[civilDate{y, m, d}] {
		return "excluded by exclude.dates (" + local.Format(time.DateOnly) + ")", endOfDay
	}
	_, off := local.Zone()
	w := wall(t, off)
	for _, e := range s.exCrons {
		if !e.matches(w) {
			continue
		}
		why := fmt.Sprintf("excluded by exclude.cron[%d] %q", e.index, e.text)
		if e.day {
			return why, endOfDay
		}
		until := instant(e.stretchEnd(w), off)
		if _, zoneEnd := zoneBounds(t, s.loc); !zoneEnd.IsZero() && !until.Before(zoneEnd) {
			until = zoneEnd.Add(-time.Second) // a wall-clock time is this instant only at this offset
		}
		if until.Before(t) {
			until = t
		}
		return why, until
	}
	return "", t
}

// matches reports whether the exclusion matches the wall-clock time w
// (expressed in UTC); a five-field expression matches a whole minute.
// Days follow cron's rule: when day of month and day of week are both
// restricted, either matches.
func (e exclusion) matches(w time.Time) bool {
	c := e.civil
	if !e.minute && !has(c.Second, w.Second()) {
		return false
	}
	if !has(c.Minute, w.Minute()) || !has(c.Hour, w.Hour()) || !has(c.Month, int(w.Month())) {
		return false
	}
	dom, dow := has(c.Dom, w.Day()), has(c.Dow, int(w.Weekday()))
	if c.Dom&starBit != 0 || c.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// stretchEnd is the last wall-clock time of the run of times, starting at
// w (which matches), that the exclusion matches as its finest restricted
// field shows: the following seconds it names; or, every second named,
// the following minutes; or, every minute too, the following hours.
func (e exclusion) stretchEnd(w time.Time) time.Time {
	c := e.civil
	y, mo, d := w.Date()
	h, mi, sec := w.Clock()
	switch {
	case !e.minute && !every(c.Second, 59):
		return time.Date(y, mo, d, h, mi, runEnd(c.Second, sec, 59), 0, time.UTC)
	case !every(c.Minute, 59):
		return time.Date(y, mo, d, h, runEnd(c.Minute, mi, 59), 59, 0, time.UTC)
	}
	return time.Date(y, mo, d, runEnd(c.Hour, h, 23), 59, 59, 0, time.UTC)
}

func has(mask uint64, v int) bool { return mask&(1<<uint(v)) != 0 }

// every reports whether mask names every value 0..top.
func every(mask uint64, top int) bool {
	all := uint64(1)<<uint(top+1) - 1
	return mask&all == all
}

// runEnd is the last value of the run of values mask names from v on.
func runEnd(mask uint64, v, top int) int {
	for v < top && has(mask, v+1) {
		v++
	}
	return v
}

// For returns the schedule with its jitter drawn for the job namespace/name
// (not its id, so that a preview of a file before apply shows the offsets
// the job will fire at): two jobs of one schedule fire at different
// offsets, and one job at the same offset wherever it is computed.
func (s *Schedule) For(namespace, name string) *Schedule {
	c := *s
	c.seed = namespace + "/" + name
	return &c
}

// Offset is the delay of instant's firing: 0 without jitter; otherwise
// whole seconds in [0, jitter), a hash of the job (For) and the instant,
// and always short of the next instant, so that fire times keep the
// instants' order.
func (s *Schedule) Offset(instant time.Time) time.Duration {
	if s.jitter <= 0 || s.OneTime() {
		return 0
	}
	limit := s.jitter
	if next, ok := s.Next(instant); ok && next.Sub(instant) < limit {
		limit = next.Sub(instant)
	}
	n := int64((limit + time.Second - 1) / time.Second) // the whole seconds below limit: 0 .. n-1
	if n <= 1 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(s.seed))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(instant.Unix()))
	h.Write(b[:])
	return time.Duration(h.Sum64()%uint64(n)) * time.Second
}

// Fire is when instant fires: instant plus its Offset.
func (s *Schedule) Fire(instant time.Time) time.Time { return instant.Add(s.Offset(instant)) }

// InstantOf is the instant whose fire time is fire (the inverse of Fire,
// for the fire times the database keeps); fire itself when no instant of
// the schedule fires then (a time written under an older definition).
func (s *Schedule) InstantOf(fire time.Time) time.Time {
	if s.jitter <= 0 || s.OneTime() {
		return fire
	}
	for at := fire.Add(-s.jitter - time.Second); ; {
		next, ok := s.Next(at)
		if !ok || next.After(fire) {
			return fire
		}
		if s.Fire(next).Equal(fire) {
			return next
		}
		at = next
	}
}

// Planned is one instant of a schedule as Plan shows it.
type Planned struct {
	Instant  time.Time
	Fire     time.Time // Instant plus its jitter; zero when excluded
	Excluded string    // why it does not fire; "" when it does
}

// Plan returns the instants after after up to the nth that fires, and the
// excluded ones among them with their reason (at most MaxPlanExcluded):
// preview and the schedule ledger show both.
func (s *Schedule) Plan(after time.Time, n int) []Planned { return s.PlanUntil(after, Latest, n) }

// PlanUntil is Plan up to until: the instants in (after, until].
func (s *Schedule) PlanUntil(after, until time.Time, n int) []Planned {
	var out []Planned
	if s.OneTime() {
		if at, ok := s.Next(after); ok && n > 0 && !at.After(until) {
			out = append(out, Planned{Instant: at, Fire: at})
		}
		return out
	}
	for fires, excluded := 0, 0; fires < n; {
		next, ok := s.nextCandidate(after)
		if !ok || next.After(until) {
			break
		}
		p := Planned{Instant: next, Excluded: s.Excluded(next)}
		if p.Excluded == "" {
			p.Fire = s.Fire(next)
			fires++
		} else if excluded++; excluded > MaxPlanExcluded {
			break
		}
		out = append(out, p)
		after = next
	}
	return out
}

// MaxPlanExcluded bounds the excluded instants Plan lists.
const MaxPlanExcluded = 1000

// next is the first instant of one expression strictly after after.
func (p *part) next(loc *time.Location, after time.Time) (time.Time, bool) {
	switch {
	case p.every > 0:
		if after.After(Latest) {
			return time.Time{}, false
		}
		return after.Truncate(time.Second).Add(p.every).UTC(), true
	case p.civil == nil:
		return time.Time{}, false // not made by Parse
	}
	if after.After(Latest) {
		return time.Time{}, false
	}
	from := after.Truncate(time.Second).Add(time.Second)
	limit := from.Add(horizon)

	// Walk the zone's periods of constant UTC offset, starting with the one
	// that holds from. Inside one period wall-clock time and instants move
	// together, so the first matching wall-clock time in the period's range
	// is the answer; the DST rules only act at the period's start.
	for cur := from; cur.Before(limit); {
		_, off := cur.In(loc).Zone()
		start, end := zoneBounds(cur, loc)
		lo := wall(cur, off)

		if !start.IsZero() && !p.wallish {
			_, prevOff := start.Add(-time.Second).In(loc).Zone()
			switch {
			case prevOff < off && !start.Before(from):
				// Spring forward: wall-clock times in [start+prevOff, start+off)
				// never happen; a fixed-time job due in them fires at start.
				if m, ok := p.firstWall(wall(start, prevOff), wall(start, off)); ok && m.Before(wall(start, off)) {
					return start.UTC(), true
				}
			case prevOff > off:
				// Fall back: wall-clock times in [start+off, start+prevOff)
				// happened already in the previous period; fire them only once.
				if repeatEnd := wall(start, prevOff); lo.Before(repeatEnd) {
					lo = repeatEnd
				}
			}
		}

		m, ok := p.firstWall(lo, wall(limit, off))
		if !ok {
			return time.Time{}, false
		}
		if end.IsZero() || m.Before(wall(end, off)) {
			return instant(m, off), true
		}
		cur = end
	}
	return time.Time{}, false
}

// firstWall returns the first wall-clock time at or after lo and before
// limit (all expressed in UTC) that the cron expression matches.
// robfig/cron gives up after five years; a search longer than that goes on
// where the previous one stopped.
func (p *part) firstWall(lo, limit time.Time) (time.Time, bool) {
	for at := lo.Add(-time.Second); at.Before(limit); at = at.AddDate(5, 0, 0) {
		if m := p.civil.Next(at); !m.IsZero() {
			return m, m.Before(limit)
		}
	}
	return time.Time{}, false
}

// wall is the wall-clock time of instant t at UTC offset off, expressed as
// a UTC time so that it can be compared and fed to robfig/cron without zones.
func wall(t time.Time, off int) time.Time {
	return time.Unix(t.Unix()+int64(off), 0).UTC()
}

// instant is the inverse of wall.
func instant(w time.Time, off int) time.Time {
	return time.Unix(w.Unix()-int64(off), 0).UTC()
}

// zoneBounds returns the period of constant UTC offset that holds t, as
// time.Time.ZoneBounds does (zero start or end: unbounded). Past the end of
// a zone's table, in leap years, Go (1.26) answers with a period that does
// not hold t (all of 31 December 2040, 2044, ... UTC in New York, London or
// Sydney "ends" at its midnight), and Next looped on it forever; then the
// offset changes within a day either side of t are found by bisection
// instead.
func zoneBounds(t time.Time, loc *time.Location) (start, end time.Time) {
	start, end = t.In(loc).ZoneBounds()
	if !start.After(t) && (end.IsZero() || end.After(t)) {
		return start, end
	}
	offset := func(u time.Time) int { _, off := u.In(loc).Zone(); return off }
	off := offset(t)
	// change returns the instant, within a day from t in direction dir, where
	// the offset stops being off (the first such for dir > 0, the first with
	// off for dir < 0), or t + dir day when it does not change.
	change := func(dir time.Duration) time.Time {
		same, other := t, t.Add(dir*24*time.Hour)
		if offset(other) == off {
			return other
		}
		for (other.Sub(same) * dir) > time.Second {
			mid := same.Add(other.Sub(same) / 2).Truncate(time.Second)
			if mid.Equal(same) || mid.Equal(other) {
				break
			}
			if offset(mid) == off {
				same = mid
			} else {
				other = mid
			}
		}
		if dir > 0 {
			return other
		}
		return same
	}
	return change(-1), change(1)
}
