// Package schedule parses job schedules and computes their fire instants.
//
// A schedule is either one-time (an RFC 3339 instant) or a cron expression
// evaluated in an IANA time zone. Cron expressions are parsed by
// robfig/cron/v3 (5 fields, an optional leading seconds field, descriptors
// such as @daily, and @every DURATION); the fire instants are computed here,
// because robfig/cron does not follow ISC cron across daylight-saving changes.
//
// # Daylight-saving rules (ISC cron)
//
// A schedule is "fixed-time" unless its seconds, minute or hour field is
// written with '*' (steps such as */15 included; @hourly counts as '*' in the
// hour field). For a fixed-time schedule:
//
//   - a local time inside a spring-forward gap fires once, at the first instant
//     after the gap (02:30 on the day New York skips 02:00-03:00 fires at 03:00
//     EDT);
//   - a local time inside a fall-back overlap fires once, on its first
//     occurrence (01:30 fires at 01:30 EDT, not again at 01:30 EST).
//
// A schedule with '*' in one of those fields follows the clock as it is: its
// local times inside a gap do not exist, and those inside an overlap occur
// twice. Instants that land on the same moment coalesce into one. The same
// rules apply to any change of a zone's UTC offset, not only DST (a zone that
// changes its standard offset behaves as a gap or an overlap).
//
// Day of month and day of week combine as in Vixie cron: when both are
// restricted (neither starts with '*'), a day matches if either matches;
// otherwise both must match.
//
// @every DURATION fires every DURATION of elapsed time, whole seconds,
// independent of the zone.
//
// The package does no I/O and reads no clock: callers pass the instant to
// compute from (the database's now(), or a test clock).
package schedule
