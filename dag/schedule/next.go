package schedule

import "time"

// horizon bounds the search for the next instant of a cron expression that
// matches rarely (or never, such as 30 February).
const horizon = 5 * 366 * 24 * time.Hour

// Next returns the first fire instant strictly after after, in UTC, and false
// when there is none (a one-time schedule already past, or a cron expression
// that matches no date within five years).
func (s *Schedule) Next(after time.Time) (time.Time, bool) {
	switch {
	case s.OneTime():
		if s.at.After(after) {
			return s.at, true
		}
		return time.Time{}, false
	case s.every > 0:
		return after.Truncate(time.Second).Add(s.every).UTC(), true
	}
	from := after.Truncate(time.Second).Add(time.Second)
	limit := from.Add(horizon)

	// Walk the zone's periods of constant UTC offset, starting with the one
	// that holds from. Inside one period wall-clock time and instants move
	// together, so the first matching wall-clock time in the period's range
	// is the answer; the DST rules only act at the period's start.
	for cur := from; cur.Before(limit); {
		local := cur.In(s.loc)
		_, off := local.Zone()
		start, end := local.ZoneBounds()
		lo := wall(cur, off)

		if !start.IsZero() && !s.wallish {
			_, prevOff := start.Add(-time.Second).In(s.loc).Zone()
			switch {
			case prevOff < off && !start.Before(from):
				// Spring forward: wall-clock times in [start+prevOff, start+off)
				// never happen; a fixed-time job due in them fires at start.
				if m, ok := s.firstWall(wall(start, prevOff)); ok && m.Before(wall(start, off)) {
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

		m, ok := s.firstWall(lo)
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

// firstWall returns the first wall-clock time at or after lo (both expressed
// in UTC) that the cron expression matches.
func (s *Schedule) firstWall(lo time.Time) (time.Time, bool) {
	m := s.civil.Next(lo.Add(-time.Second))
	return m, !m.IsZero()
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
