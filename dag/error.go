package dag

import (
	"fmt"
	"strings"
)

// FieldError is one problem with one field of a resource. Field is the path
// as written in YAML ("spec.steps[1].run.http.url"); File, Line and Col are
// set when the resource came from a file.
type FieldError struct {
	File    string
	Line    int
	Col     int
	Field   string
	Message string
	// Offset is where in the field's text the problem is (bytes), for an
	// expression's: Decode turns it into the column.
	Offset int
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:%d:", e.Line, e.Col)
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Errors is every problem found in a resource or a set of files, in order.
type Errors []*FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Err returns es as an error, or nil when it is empty.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

func (es *Errors) add(field, format string, args ...any) {
	*es = append(*es, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}
