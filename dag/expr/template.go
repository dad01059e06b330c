// Package expr is the expression language of job specs: `${{ EXPR }}`
// templates whose EXPR is a CEL expression (cel.dev/cel-go) over a run's
// params, its steps' outputs and statuses, the run, the job and the
// attempt. It parses and checks templates against what a step may read
// (Env.Check), and evaluates them (Program.Eval, Render) within a cost
// limit and a size bound on results. It does no I/O: callers read the
// values (Vars) and store or use the results. docs/workflows.md says where
// each expression is evaluated.
package expr

import (
	"fmt"
	"strings"
)

// A Template is a string field that may hold `${{ EXPR }}` expressions,
// split into its literal text and its expressions.
type Template []Part

// A Part is literal text or one expression.
type Part struct {
	Text   string // the literal text, when Expr is false
	Expr   bool
	Source string // the expression's source, when Expr
	Offset int    // where Source starts in the field's string (bytes)
}

// Open and Close delimit an expression; Escaped is a literal Open.
const (
	Open    = "${{"
	Close   = "}}"
	Escaped = "$" + Open
)

// HasExpr reports whether s holds an expression (or an escaped Open,
// which also needs Parse to become text).
func HasExpr(s string) bool { return strings.Contains(s, Open) }

// Parse splits s into text and expressions. An expression ends at the
// first Close that is not inside one of its string literals. An Open
// without its Close, or an empty expression, is an *Error.
func Parse(s string) (Template, error) {
	var t Template
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			t = append(t, Part{Text: text.String()})
			text.Reset()
		}
	}
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], Escaped):
			text.WriteString(Open)
			i += len(Escaped)
		case strings.HasPrefix(s[i:], Open):
			start := i + len(Open)
			end := closing(s, start)
			if end < 0 {
				return nil, &Error{Offset: i, Message: Open + " without its closing " + Close}
			}
			src := s[start:end]
			trimmed := strings.TrimSpace(src)
			if trimmed == "" {
				return nil, &Error{Offset: i, Message: "an empty " + Open + " " + Close}
			}
			flush()
			t = append(t, Part{Expr: true, Source: trimmed, Offset: start + strings.Index(src, trimmed)})
			i = end + len(Close)
		default:
			text.WriteByte(s[i])
			i++
		}
	}
	flush()
	return t, nil
}

// closing finds the Close of an expression starting at s[start:],
// skipping CEL string literals ('...', "...", with backslash escapes;
// triple-quoted ones as a run of plain ones, which ends them alike).
func closing(s string, start int) int {
	var quote byte
	for i := start; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '\'' || c == '"':
			quote = c
		case strings.HasPrefix(s[i:], Close):
			return i
		}
	}
	return -1
}

// Whole reports whether t is exactly one expression and nothing else: a
// field whose value keeps the expression's type.
func (t Template) Whole() bool { return len(t) == 1 && t[0].Expr }

// Exprs counts t's expressions.
func (t Template) Exprs() int {
	n := 0
	for _, p := range t {
		if p.Expr {
			n++
		}
	}
	return n
}

// An Error is a problem with a template or one of its expressions, at
// Offset bytes into the field's string.
type Error struct {
	Offset  int
	Source  string // the expression, when the problem is in one
	Message string
}

func (e *Error) Error() string {
	if e.Source == "" {
		return e.Message
	}
	return fmt.Sprintf("%s %s %s: %s", Open, abbreviate(e.Source), Close, e.Message)
}
