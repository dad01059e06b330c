package dag

import (
	"time"

	"github.com/orrery-dev/orrery/dag/schedule"
)

// WarnWithin is how far ahead ScheduleWarnings looks for daylight-saving
// changes.
const WarnWithin = 366 * 24 * time.Hour

// ScheduleWarnings returns warnings, not errors, about the document's
// schedule: each daylight-saving change of its zone within WarnWithin of
// now that meets one of its cron expressions, saying what Orrery does on
// that date and how to avoid it (schedule.DSTWarnings), at the
// expression's position.
func (d *Document) ScheduleWarnings(now time.Time) Errors {
	var out Errors
	for _, w := range ScheduleWarnings(d.Resource.Spec.Schedule, now) {
		h := &FieldError{File: d.File, Field: "spec.schedule." + w.Field, Message: "warning: " + w.Message}
		h.Line, h.Col = d.Position(h.Field)
		out = append(out, h)
	}
	return out
}

// ScheduleWarnings is Document.ScheduleWarnings for a schedule without a
// document (the web UI's job page).
func ScheduleWarnings(spec schedule.Spec, now time.Time) []schedule.Warning {
	s, err := schedule.Parse(spec)
	if err != nil {
		return nil
	}
	return s.DSTWarnings(spec, now, WarnWithin)
}
