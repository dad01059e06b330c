package schedule

import (
	"slices"
	"time"
)

// CatchUp returns the next fire time when instants from the fire time
// pending up to now may have been missed and the misfire policy fires the
// latest keep of them (internal/lifecycle.MisfireKeep): with keep 0, that
// of the first instant after now; otherwise that of the earliest of the
// latest keep missed instants. When nothing was missed (pending after
// now) it returns pending. False means nothing is left to fire.
func (s *Schedule) CatchUp(keep int, pending, now time.Time) (time.Time, bool) {
	if pending.After(now) {
		return pending, true
	}
	if s.OneTime() {
		if keep == 0 {
			return time.Time{}, false
		}
		return s.at, true
	}
	next := func() (time.Time, bool) {
		at, ok := s.Next(now)
		if !ok {
			return time.Time{}, false
		}
		return s.Fire(at), true
	}
	if keep == 0 {
		return next()
	}
	missed := s.lastMissed(s.InstantOf(pending), now, keep)
	if len(missed) == 0 {
		return next()
	}
	return s.Fire(missed[0]), true
}

// lastMissed returns up to keep of the latest instants in [pending, now],
// oldest first. It looks back from now in growing windows, so a dense
// schedule paused for months costs little.
func (s *Schedule) lastMissed(pending, now time.Time, keep int) []time.Time {
	const widest = time.Duration(1 << 62) // 146 years; window*4 would overflow soon after
	for window := time.Minute; ; window = min(window, widest/4) * 4 {
		from := now.Add(-window)
		whole := window >= widest || !from.After(pending)
		if whole {
			from = pending.Add(-time.Second) // Next is strictly after
		}
		var found []time.Time
		for at := from; ; {
			next, ok := s.Next(at)
			if !ok || next.After(now) {
				break
			}
			found = append(found, next)
			if len(found) > keep {
				found = found[1:]
			}
			at = next
		}
		if len(found) >= keep || whole {
			return found
		}
	}
}

// Between returns up to n instants in [from, until], oldest first, and
// whether there are more after them.
func (s *Schedule) Between(from, until time.Time, n int) ([]time.Time, bool) {
	var out []time.Time
	for at := from.Add(-time.Nanosecond); ; {
		next, ok := s.Next(at)
		if !ok || next.After(until) {
			return out, false
		}
		if len(out) == n {
			return out, true
		}
		out = append(out, next)
		at = next
	}
}

// Latest returns up to n of the latest instants in [from, until], newest
// first (a backfill newest first).
func (s *Schedule) Latest(from, until time.Time, n int) []time.Time {
	if n <= 0 || until.Before(from) {
		return nil
	}
	if s.OneTime() {
		if s.at.Before(from) || s.at.After(until) {
			return nil
		}
		return []time.Time{s.at}
	}
	from = from.Add(time.Second - time.Nanosecond).Truncate(time.Second) // instants are whole seconds: the first at or after from
	got := s.lastMissed(from, until, n)
	slices.Reverse(got)
	return got
}
