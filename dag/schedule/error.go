package schedule

import "fmt"

// Error reports an invalid schedule. Field is the schedule field at fault:
// "cron", "timezone" or "at".
type Error struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Message) }

func errorf(field, format string, args ...any) *Error {
	return &Error{Field: field, Message: fmt.Sprintf(format, args...)}
}
