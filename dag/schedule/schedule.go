package schedule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // zones resolve the same on machines without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"
)

// Spec is a schedule as users write it: either Cron (one expression or a
// list, with an optional Timezone, default UTC, and the fields that shape
// its instants) or At. CatchupWindow applies to both.
type Spec struct {
	Cron     CronList `json:"cron,omitempty" yaml:"cron,omitempty"`
	Timezone string   `json:"timezone,omitempty" yaml:"timezone,omitempty"`
	At       string   `json:"at,omitempty" yaml:"at,omitempty"`
	// Start and End (RFC 3339) bound the instants: none before Start or
	// after End.
	Start string `json:"start,omitempty" yaml:"start,omitempty"`
	End   string `json:"end,omitempty" yaml:"end,omitempty"`
	// Jitter delays each instant's firing by an offset in [0, Jitter),
	// whole seconds, a function of the job and the instant (Offset), and
	// always before the next instant.
	Jitter *Duration `json:"jitter,omitempty" yaml:"jitter,omitempty"`
	// CatchupWindow is how late an instant may fire and still count as on
	// time (later ones go to the misfire policy); nil: the process's
	// default (orrery serve --misfire-after).
	CatchupWindow *Duration `json:"catchup_window,omitempty" yaml:"catchup_window,omitempty"`
	// Exclude removes instants: nothing fires on them.
	Exclude *Exclude `json:"exclude,omitempty" yaml:"exclude,omitempty"`
	// After starts a run each time a run of another job of the tenant
	// ends with one of the listed outcomes; alone, or beside cron or at.
	After *After `json:"after,omitempty" yaml:"after,omitempty"`
	// Event starts a run for each event of the tenant of its type whose
	// filter holds (docs/events.md); alone, or beside cron, at or after.
	Event *Event `json:"event,omitempty" yaml:"event,omitempty"`
}

// Event names the events that start the job's runs.
type Event struct {
	// Type is the events' type (ValidEventType's form).
	Type string `json:"type" yaml:"type"`
	// Filter, when set, is a condition over the event (`${{ EXPR }}` of a
	// bool reading event): an event it is false for starts nothing. The
	// dag package compiles it.
	Filter string `json:"filter,omitempty" yaml:"filter,omitempty"`
}

// MaxEventType bounds an event type's length.
const MaxEventType = 200

// ValidEventType says what is wrong with an event type ("" when nothing):
// 1 to MaxEventType characters of letters, digits and . _ - : /, the first
// a letter or digit.
func ValidEventType(t string) string {
	switch {
	case t == "":
		return "name the event type"
	case len(t) > MaxEventType:
		return fmt.Sprintf("is %d characters; the limit is %d", len(t), MaxEventType)
	}
	for i, c := range t {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("._-:/", c)) {
			return fmt.Sprintf("%q: letters, digits and . _ - : / (the first a letter or digit)", t)
		}
	}
	return ""
}

func checkEvent(e *Event) *Error {
	if e == nil {
		return nil
	}
	if msg := ValidEventType(e.Type); msg != "" {
		return errorf("event.type", "%s", msg)
	}
	return nil
}

// After names the upstream job whose runs' ends start the job's runs.
type After struct {
	// Job is the upstream job's name; Namespace its namespace (empty: the
	// job's own).
	Job       string `json:"job" yaml:"job"`
	Namespace string `json:"namespace,omitempty" yaml:"namespace,omitempty"`
	// On are the upstream outcomes that start a run (empty: succeeded).
	On []string `json:"on,omitempty" yaml:"on,omitempty"`
}

// AfterOutcomes are the outcomes an After may name: how a run ends.
// dead_lettered is failed: a run whose task failed for good ended
// dead_lettered in earlier versions, and a spec of theirs may name it.
var AfterOutcomes = []string{"succeeded", "failed", "dead_lettered", "cancelled"}

// Names says whether on (an After's outcomes) names a run that ended in
// status, taking dead_lettered for failed on both sides (AfterOutcomes).
func Names(on []string, status string) bool {
	ended := func(s string) string {
		if s == "dead_lettered" {
			return "failed"
		}
		return s
	}
	return slices.ContainsFunc(on, func(o string) bool { return ended(o) == ended(status) })
}

// Outcomes is a.On, or succeeded when empty.
func (a *After) Outcomes() []string {
	if len(a.On) == 0 {
		return []string{"succeeded"}
	}
	return a.On
}

// Exclude lists the instants on which a schedule does not fire, in its
// zone: whole days (YYYY-MM-DD), and cron expressions whose every match is
// excluded (five fields: every second of a matching minute).
type Exclude struct {
	Dates []string `json:"dates,omitempty" yaml:"dates,omitempty"`
	Cron  []string `json:"cron,omitempty" yaml:"cron,omitempty"`
}

// Bounds on a schedule's lists.
const (
	MaxCrons        = 20
	MaxExcludeDates = 1000
	MaxExcludeCrons = 20
	// MaxCatchupWindow bounds catchup_window: a year.
	MaxCatchupWindow = 366 * 24 * time.Hour
)

// Schedule is a parsed Spec. The zero value is not usable; call Parse.
type Schedule struct {
	loc *time.Location

	at      time.Time // one-time schedules (oneTime set)
	oneTime bool      // at is the instant; not at.IsZero(), which 0001-01-01T00:00:00Z also is
	parts   []part    // cron schedules: one per expression

	start, end time.Time // zero: unbounded
	jitter     time.Duration
	catchup    time.Duration
	exDates    map[civilDate]bool
	exCrons    []exclusion
	seed       string // For: the job the jitter is drawn for
}

// part is one cron expression of a schedule.
type part struct {
	every   time.Duration      // @every schedules
	civil   *cron.SpecSchedule // cron schedules, evaluated on local wall-clock time expressed in UTC
	wallish bool               // '*' in seconds, minute or hour: follows the clock through DST changes
}

// civilDate is a day of the calendar.
type civilDate struct {
	y int
	m time.Month
	d int
}

// exclusion is one expression of exclude.cron.
type exclusion struct {
	civil  *cron.SpecSchedule
	minute bool   // five fields: a match excludes its whole minute
	day    bool   // seconds, minute and hour all '*': a match excludes its whole day
	text   string // as written, for reasons
	index  int
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
// the field ("cron", "cron[1]", "timezone", "at", "start", "end", "jitter",
// "catchup_window", "exclude.dates[0]", "exclude.cron[0]") and, for cron,
// the cron field.
func Parse(spec Spec) (*Schedule, error) {
	if spec.CatchupWindow != nil && (spec.CatchupWindow.Duration < time.Second || spec.CatchupWindow.Duration > MaxCatchupWindow) {
		return nil, errorf("catchup_window", "%s is outside 1s..%s", spec.CatchupWindow.Duration, MaxCatchupWindow)
	}
	var catchup time.Duration
	if spec.CatchupWindow != nil {
		catchup = spec.CatchupWindow.Duration
	}
	hasCron := false
	for _, c := range spec.Cron {
		hasCron = hasCron || strings.TrimSpace(c) != ""
	}
	switch {
	case hasCron && spec.At != "":
		return nil, errorf("at", "a schedule has either cron or at, not both")
	case spec.At != "":
		if spec.Timezone != "" {
			return nil, errorf("timezone", "a one-time schedule takes its offset from at; timezone applies to cron only")
		}
		for field, set := range map[string]bool{"start": spec.Start != "", "end": spec.End != "", "jitter": spec.Jitter != nil, "exclude": spec.Exclude != nil} {
			if set {
				return nil, errorf(field, "applies to cron schedules only; a one-time schedule fires at at")
			}
		}
		at, err := time.Parse(time.RFC3339, spec.At)
		if err != nil {
			return nil, errorf("at", "%q is not an RFC 3339 instant such as 2026-12-31T23:59:59Z", spec.At)
		}
		if err := checkAfter(spec.After); err != nil {
			return nil, err
		}
		if err := checkEvent(spec.Event); err != nil {
			return nil, err
		}
		return &Schedule{loc: time.UTC, at: at.UTC(), oneTime: true, catchup: catchup}, nil
	case !hasCron && (spec.After != nil || spec.Event != nil):
		for field, set := range map[string]bool{"timezone": spec.Timezone != "", "start": spec.Start != "", "end": spec.End != "", "jitter": spec.Jitter != nil, "exclude": spec.Exclude != nil} {
			if set {
				return nil, errorf(field, "applies to cron schedules only; a schedule of after or event alone has no instants of its own")
			}
		}
		if err := checkAfter(spec.After); err != nil {
			return nil, err
		}
		if err := checkEvent(spec.Event); err != nil {
			return nil, err
		}
		return &Schedule{loc: time.UTC, catchup: catchup}, nil
	case !hasCron:
		return nil, errorf("cron", "a schedule needs cron, at, after or event")
	case len(spec.Cron) > MaxCrons:
		return nil, errorf("cron", "%d expressions; the limit is %d", len(spec.Cron), MaxCrons)
	}

	loc, err := loadLocation(spec.Timezone)
	if err != nil {
		return nil, err
	}
	if err := checkAfter(spec.After); err != nil {
		return nil, err
	}
	if err := checkEvent(spec.Event); err != nil {
		return nil, err
	}
	s := &Schedule{loc: loc, catchup: catchup}
	for i, text := range spec.Cron {
		p, err := parsePart(strings.TrimSpace(text))
		if err != nil {
			err.Field = spec.Cron.field(i)
			return nil, err
		}
		s.parts = append(s.parts, p)
	}
	for _, b := range []struct {
		field, text string
		to          *time.Time
	}{{"start", spec.Start, &s.start}, {"end", spec.End, &s.end}} {
		if b.text == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, b.text)
		if err != nil {
			return nil, errorf(b.field, "%q is not an RFC 3339 instant such as 2026-12-01T00:00:00Z", b.text)
		}
		*b.to = t.UTC()
	}
	if !s.start.IsZero() && !s.end.IsZero() && !s.end.After(s.start) {
		return nil, errorf("end", "%s is not after start %s", spec.End, spec.Start)
	}
	if spec.Jitter != nil {
		if spec.Jitter.Duration < 0 || spec.Jitter.Duration > MaxCatchupWindow {
			return nil, errorf("jitter", "%s is outside 0s..%s", spec.Jitter.Duration, MaxCatchupWindow)
		}
		s.jitter = spec.Jitter.Duration
	}
	if ex := spec.Exclude; ex != nil {
		if len(ex.Dates) > MaxExcludeDates {
			return nil, errorf("exclude.dates", "%d dates; the limit is %d", len(ex.Dates), MaxExcludeDates)
		}
		if len(ex.Cron) > MaxExcludeCrons {
			return nil, errorf("exclude.cron", "%d expressions; the limit is %d", len(ex.Cron), MaxExcludeCrons)
		}
		for i, d := range ex.Dates {
			t, err := time.Parse(time.DateOnly, d)
			if err != nil {
				return nil, errorf(fmt.Sprintf("exclude.dates[%d]", i), "%q is not a date such as 2026-12-24", d)
			}
			if s.exDates == nil {
				s.exDates = map[civilDate]bool{}
			}
			s.exDates[civilDate{t.Year(), t.Month(), t.Day()}] = true
		}
		for i, text := range ex.Cron {
			e, err := parseExclusion(strings.TrimSpace(text))
			if err != nil {
				err.Field = fmt.Sprintf("exclude.cron[%d]", i)
				return nil, err
			}
			e.text, e.index = strings.TrimSpace(text), i
			s.exCrons = append(s.exCrons, e)
		}
	}
	return s, nil
}

// checkAfter checks after's outcomes (its job's name is the job
// package's to check: dag.JobSpec.Validate).
func checkAfter(a *After) *Error {
	if a == nil {
		return nil
	}
	if strings.TrimSpace(a.Job) == "" {
		return errorf("after.job", "name the upstream job")
	}
	if len(a.On) > len(AfterOutcomes) {
		return errorf("after.on", "%d outcomes; there are %d", len(a.On), len(AfterOutcomes))
	}
	for i, o := range a.On {
		if !slices.Contains(AfterOutcomes, o) {
			return errorf(fmt.Sprintf("after.on[%d]", i), "%q is not one of %s", o, strings.Join(AfterOutcomes, ", "))
		}
		if slices.Contains(a.On[:i], o) {
			return errorf(fmt.Sprintf("after.on[%d]", i), "%q is listed twice", o)
		}
	}
	return nil
}

// parsePart parses one cron expression. Its errors name the field "cron";
// Parse renames it for lists.
func parsePart(cronText string) (part, *Error) {
	if strings.HasPrefix(cronText, "TZ=") || strings.HasPrefix(cronText, "CRON_TZ=") {
		return part{}, errorf("cron", "set the zone in timezone, not with a TZ= prefix")
	}
	if cronText == "" {
		return part{}, errorf("cron", "an empty expression")
	}
	if rest, ok := strings.CutPrefix(cronText, "@every"); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			return part{}, errorf("cron", "@every needs a duration such as @every 90s")
		}
		if d < time.Second || d%time.Second != 0 {
			return part{}, errorf("cron", "@every %s: the interval must be a whole number of seconds, at least 1s", d)
		}
		return part{every: d}, nil
	}
	civil, fields, err := parseCivil(cronText)
	if err != nil {
		return part{}, err
	}
	if fields == nil {
		return part{civil: civil, wallish: cronText == "@hourly"}, nil
	}
	return part{civil: civil, wallish: strings.Contains(fields[0], "*") || strings.Contains(fields[1], "*") || strings.Contains(fields[2], "*")}, nil
}

// parseExclusion parses one expression of exclude.cron (no @every: it
// names no instants on the calendar).
func parseExclusion(cronText string) (exclusion, *Error) {
	if strings.HasPrefix(cronText, "@every") {
		return exclusion{}, errorf("cron", "@every names no calendar times; write the window with the five or six cron fields")
	}
	if cronText == "" {
		return exclusion{}, errorf("cron", "an empty expression")
	}
	civil, fields, err := parseCivil(cronText)
	if err != nil {
		return exclusion{}, err
	}
	written := strings.Fields(cronText)
	e := exclusion{civil: civil, minute: len(written) == 5 || fields == nil}
	if fields != nil {
		e.day = fields[1] == "*" && fields[2] == "*" && (len(written) == 5 || fields[0] == "*")
	}
	return e, nil
}

// parseCivil parses a cron expression (not @every) into a schedule of
// wall-clock times expressed in UTC, and returns its six fields (nil for
// a descriptor such as @daily).
func parseCivil(cronText string) (*cron.SpecSchedule, []string, *Error) {
	parsed, err := cronParser.Parse(cronText)
	if err != nil {
		return nil, nil, explainCronError(cronText, err)
	}
	spec6, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, nil, errorf("cron", "unsupported expression %q", cronText)
	}
	civil := *spec6
	civil.Location = time.UTC
	if strings.HasPrefix(cronText, "@") {
		return &civil, nil, nil
	}
	fields := strings.Fields(cronText)
	if len(fields) == 5 {
		fields = append([]string{"0"}, fields...)
	}
	// Vixie cron: a day field that starts with '*' (including '*/2') means
	// "both day fields must match"; robfig/cron forgets that for stepped stars.
	if isStar(fields[3]) {
		civil.Dom |= starBit
	}
	if isStar(fields[5]) {
		civil.Dow |= starBit
	}
	return &civil, fields, nil
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
	case len(s.parts) == 0:
		return "after another job"
	case len(s.parts) == 1 && s.parts[0].every > 0:
		return fmt.Sprintf("every %s", s.parts[0].every)
	default:
		return "cron in " + s.loc.String()
	}
}

// Equal reports whether two specs are the same schedule as written.
func (s Spec) Equal(o Spec) bool {
	a, errA := json.Marshal(s)
	b, errB := json.Marshal(o)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// CatchupWindow is the schedule's catchup_window, 0 when it has none.
func (s *Schedule) CatchupWindow() time.Duration { return s.catchup }

// Jitter is the schedule's jitter, 0 when it has none.
func (s *Schedule) Jitter() time.Duration { return s.jitter }

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

// Anchored reports whether the schedule's instants are fixed on the
// calendar: false when one of its expressions is @every, whose instants
// count from wherever the computation starts.
func (s *Schedule) Anchored() bool { return s.OneTime() || s.civilOnly() }
