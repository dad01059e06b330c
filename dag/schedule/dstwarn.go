package schedule

import (
	"fmt"
	"time"
)

// Warning is a daylight-saving change that one of a schedule's cron
// expressions meets: Field names the expression ("cron", "cron[1]").
type Warning struct {
	Field   string
	On      time.Time // the instant the zone's offset changes
	Message string
}

// DSTWarnings lists the changes of the schedule's zone in (from, from +
// within] whose skipped or repeated wall-clock hour holds a time one of
// its expressions names, saying what Orrery does on that date (the rules
// in the package doc) and how to write the schedule to avoid it; changes
// outside the schedule's start and end are left out, excluded days are
// not (the warning is about the expression). One-time and @every
// schedules have none.
func (s *Schedule) DSTWarnings(spec Spec, from time.Time, within time.Duration) []Warning {
	if s.OneTime() || s.loc == time.UTC {
		return nil
	}
	var out []Warning
	until := from.Add(within)
	for cur := from; cur.Before(until); {
		_, end := zoneBounds(cur, s.loc)
		if end.IsZero() || end.After(until) {
			break
		}
		if (!s.start.IsZero() && end.Before(s.start.Add(-24*time.Hour))) || (!s.end.IsZero() && end.After(s.end.Add(24*time.Hour))) {
			cur = end
			continue
		}
		_, before := end.Add(-time.Second).In(s.loc).Zone()
		abbr, after := end.In(s.loc).Zone()
		prevAbbr, _ := end.Add(-time.Second).In(s.loc).Zone()
		lo, hi := wall(end, min(before, after)), wall(end, max(before, after))
		day := end.In(s.loc).Format(time.DateOnly)
		for i := range s.parts {
			p := &s.parts[i]
			if p.civil == nil {
				continue
			}
			m, ok := p.firstWall(lo, hi)
			if !ok || !m.Before(hi) {
				continue
			}
			hour := fmt.Sprintf("%s-%s", lo.Format("15:04"), hi.Format("15:04"))
			avoid := fmt.Sprintf("to avoid it, name times outside %s in %s, or use timezone: UTC", hour, s.loc)
			var msg string
			switch {
			case after > before && !p.wallish:
				msg = fmt.Sprintf("on %s the clocks in %s skip %s: %s does not exist that day, and Orrery fires it once at %s %s (the end of the gap); %s",
					day, s.loc, hour, m.Format("15:04:05"), hi.Format("15:04"), abbr, avoid)
			case after > before:
				msg = fmt.Sprintf("on %s the clocks in %s skip %s: the times it names in that hour (from %s) do not exist that day and do not fire; %s",
					day, s.loc, hour, m.Format("15:04:05"), avoid)
			case !p.wallish:
				msg = fmt.Sprintf("on %s the clocks in %s go back and %s happens twice: Orrery fires %s once, at its first occurrence (%s, before the change); %s",
					day, s.loc, hour, m.Format("15:04:05"), prevAbbr, avoid)
			default:
				msg = fmt.Sprintf("on %s the clocks in %s go back and %s happens twice: the times it names in that hour (from %s) fire twice, %s then %s; %s",
					day, s.loc, hour, m.Format("15:04:05"), prevAbbr, abbr, avoid)
			}
			out = append(out, Warning{Field: spec.Cron.field(i), On: end, Message: msg})
		}
		cur = end
	}
	return out
}
