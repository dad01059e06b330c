package schedule

import "time"

// horizon bounds the search for the next instant of a cron expression that
// matches rarely (or never, such as 30 February): the longest wait between
// two fire days that Validate accepts (MaxGap, 8 years: 29 February waits
// that long across 2100), plus two days for the time of day and the zone's
// offset.
const horizon = MaxGap + 2*24*time.Hour

// Next returns the first fire instant strictly after after, in UTC, and false
// when there is none: a one-time schedule already past, a cron expression
// that matches no date within the horizon (MaxGap, 8 years, and two days),
// or an instant past Latest (9999-12-31T23:59:59.999999999Z).
func (s *Schedule) Next(after time.Time) (time.Time, bool) {
	next, ok := s.next(after)
	if !ok || next.After(Latest) {
		return time.Time{}, false
	}
	return next, true
}

func (s *Schedule) next(after time.Time) (time.Time, bool) {
	switch {
	case s.OneTime():
		if s.at.After(after) {
			return s.at, true
		}
		return time.Time{}, false
	case s.every > 0:
		if after.After(Latest) {
			return time.Time{}, false
		}
		return after.Truncate(time.Second).Add(s.every).UTC(), true
	case s.civil == nil:
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
		_, off := cur.In(s.loc).Zone()
		start, end := zoneBounds(cur, s.loc)
		lo := wall(cur, off)

		if !start.IsZero() && !s.wallish {
			_, prevOff := start.Add(-time.Second).In(s.loc).Zone()
			switch {
			case prevOff < off && !start.Before(from):
				// Spring forward: wall-clock times in [start+prevOff, start+off)
				// never happen; a fixed-time job due in them fires at start.
				if m, ok := s.firstWall(wall(start, prevOff), wall(start, off)); ok && m.Before(wall(start, off)) {
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

		m, ok := s.firstWall(lo, wall(limit, off))
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
func (s *Schedule) firstWall(lo, limit time.Time) (time.Time, bool) {
	for at := lo.Add(-time.Second); at.Before(limit); at = at.AddDate(5, 0, 0) {
		if m := s.civil.Next(at); !m.IsZero() {
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
