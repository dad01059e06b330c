package schedule

import (
	"fmt"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // zones resolve the same on machines without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"
)

// Spec is a schedule as users write it: either Cron (with an optional
// Timezone, default UTC) or At.
type Spec struct {
	Cron     string `json:"cron,omitempty" yaml:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty" yaml:"timezone,omitempty"`
	At       string `json:"at,omitempty" yaml:"at,omitempty"`
}

// Schedule is a parsed Spec. The zero value is not usable; call Parse.
type Schedule struct {
	loc *time.Location

	at      time.Time          // one-time schedules (oneTime set)
	oneTime bool               // at is the instant; not at.IsZero(), which 0001-01-01T00:00:00Z also is
	every   time.Duration      // @every schedules
	civil   *cron.SpecSchedule // cron schedules, evaluated on local wall-clock time expressed in UTC
	wallish bool               // '*' in seconds, minute or hour: follows the clock through DST changes
}

// starBit is robfig/cron's marker for a field written as '*'; its day matching
// uses it to choose between AND and OR of day-of-month and day-of-week.
const starBit = 1 << 63

var (
	cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	// fieldParser checks one field at a time, to name the field at fault.
	fieldParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
)

// fieldNames names the six fields of a cron expression with seconds.
var fieldNames = [6]string{"seconds", "minute", "hour", "day-of-month", "month", "day-of-week"}

// Parse validates spec and returns the schedule. Errors are *Error naming
// the field ("cron", "timezone" or "at") and, for cron, the cron field.
func Parse(spec Spec) (*Schedule, error) {
	cronText := strings.TrimSpace(spec.Cron)
	switch {
	case cronText != "" && spec.At != "":
		return nil, errorf("at", "a schedule has either cron or at, not both")
	case spec.At != "":
		if spec.Timezone != "" {
			return nil, errorf("timezone", "a one-time schedule takes its offset from at; timezone applies to cron only")
		}
		at, err := time.Parse(time.RFC3339, spec.At)
		if err != nil {
			return nil, errorf("at", "%q is not an RFC 3339 instant such as 2026-12-31T23:59:59Z", spec.At)
		}
		return &Schedule{loc: time.UTC, at: at.UTC(), oneTime: true}, nil
	case cronText == "":
		return nil, errorf("cron", "a schedule needs cron or at")
	}

	loc, err := loadLocation(spec.Timezone)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(cronText, "TZ=") || strings.HasPrefix(cronText, "CRON_TZ=") {
		return nil, errorf("cron", "set the zone in timezone, not with a TZ= prefix")
	}
	if rest, ok := strings.CutPrefix(cronText, "@every"); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			return nil, errorf("cron", "@every needs a duration such as @every 90s")
		}
		if d < time.Second || d%time.Second != 0 {
			return nil, errorf("cron", "@every %s: the interval must be a whole number of seconds, at least 1s", d)
		}
		return &Schedule{loc: loc, every: d}, nil
	}

	parsed, err := cronParser.Parse(cronText)
	if err != nil {
		return nil, explainCronError(cronText, err)
	}
	spec6, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, errorf("cron", "unsupported expression %q", cronText)
	}
	civil := *spec6
	civil.Location = time.UTC
	s := &Schedule{loc: loc, civil: &civil}
	if strings.HasPrefix(cronText, "@") {
		s.wallish = cronText == "@hourly"
		return s, nil
	}
	fields := strings.Fields(cronText)
	if len(fields) == 5 {
		fields = append([]string{"0"}, fields...)
	}
	s.wallish = strings.Contains(fields[0], "*") || strings.Contains(fields[1], "*") || strings.Contains(fields[2], "*")
	// Vixie cron: a day field that starts with '*' (including '*/2') means
	// "both day fields must match"; robfig/cron forgets that for stepped stars.
	if isStar(fields[3]) {
		civil.Dom |= starBit
	}
	if isStar(fields[5]) {
		civil.Dow |= starBit
	}
	return s, nil
}

func isStar(field string) bool { return strings.HasPrefix(field, "*") || strings.HasPrefix(field, "?") }

func loadLocation(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, errorf("timezone", "name an IANA zone such as America/New_York; Local depends on the machine")
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name) // reads the zone file: cached below
	if err != nil {
		return nil, errorf("timezone", "unknown IANA time zone %q", name)
	}
	zones.Store(name, loc)
	return loc, nil
}

// zones caches loaded time zones by name; the scheduler parses schedules
// on every pass.
var zones sync.Map

// explainCronError turns robfig/cron's message into one that names the
// cron field at fault.
func explainCronError(text string, err error) *Error {
	if strings.HasPrefix(text, "@") {
		return errorf("cron", "unknown descriptor %q (use @yearly, @monthly, @weekly, @daily, @hourly or @every DURATION)", text)
	}
	fields := strings.Fields(text)
	names := fieldNames[:]
	switch len(fields) {
	case 5:
		names = fieldNames[1:]
	case 6:
	default:
		return errorf("cron", "%q has %d fields; want 5 (minute hour day-of-month month day-of-week) or 6 with a leading seconds field", text, len(fields))
	}
	probe := [6]string{"0", "0", "0", "1", "1", "*"}
	for i, f := range fields {
		p := probe
		p[6-len(fields)+i] = f
		if _, ferr := fieldParser.Parse(strings.Join(p[:], " ")); ferr != nil {
			return errorf("cron", "%s field %q: %v", names[i], f, ferr)
		}
	}
	return errorf("cron", "%v", err)
}

// Location is the zone the schedule is evaluated in (UTC for one-time).
func (s *Schedule) Location() *time.Location { return s.loc }

// OneTime reports whether the schedule fires once, at a fixed instant.
func (s *Schedule) OneTime() bool { return s.oneTime }

// At is a one-time schedule's instant, in UTC (the zero time for cron).
func (s *Schedule) At() time.Time { return s.at }

// String describes the schedule's kind for logs.
func (s *Schedule) String() string {
	switch {
	case s.OneTime():
		return "at " + s.at.Format(time.RFC3339)
	case s.every > 0:
		return fmt.Sprintf("every %s", s.every)
	default:
		return "cron in " + s.loc.String()
	}
}

// Upcoming returns up to n fire instants after after, in order.
func (s *Schedule) Upcoming(after time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for len(out) < n {
		next, ok := s.Next(after)
		if !ok {
			break
		}
		out = append(out, next)
		after = next
	}
	return out
}
