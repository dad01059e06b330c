package dag

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// ArgFields are the fields a command step's arguments may name, as
// {{ .Field }}: all a worker fills in, each a short value.
var ArgFields = []string{"ScheduledFor", "RunID", "Step", "Attempt", "Job", "Namespace"}

// ExpandArg fills the {{ .Field }} references of a command argument with
// values (by field name). Only the ArgFields, one plain reference each,
// are allowed, and {{ "{{" }} for a literal {{: not Go's template
// language, whose loops and functions would let a job author spend a
// worker's CPU and memory (a range over a huge number, a printf of a huge
// width) where no timeout reaches. With nil values it only checks arg
// (what validation does).
func ExpandArg(arg string, values map[string]string) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(arg, "{{")
		if i < 0 { // (a lone "}}" is plain text)
			b.WriteString(arg)
			return b.String(), nil
		}
		b.WriteString(arg[:i])
		rest := arg[i+2:]
		j := strings.Index(rest, "}}")
		if j < 0 {
			return "", fmt.Errorf("%q: {{ without a closing }}", arg)
		}
		ref := strings.TrimSpace(rest[:j])
		if ref == `"{{"` { // a literal {{ (docker --format '{{ "{{" }}.State}}')
			b.WriteString("{{")
			arg = rest[j+2:]
			continue
		}
		name, ok := strings.CutPrefix(ref, ".")
		if !ok || !slices.Contains(ArgFields, name) {
			return "", fmt.Errorf("{{ %s }} is not one of %s", ref, argFieldList())
		}
		if values != nil {
			b.WriteString(values[name])
		}
		arg = rest[j+2:]
	}
}

func argFieldList() string {
	refs := make([]string, len(ArgFields))
	for i, f := range ArgFields {
		refs[i] = "{{ ." + f + " }}"
	}
	return strings.Join(refs, ", ")
}

// newerForms are the expressions that say what the older {{ .Field }}
// references say ({{ .Step }} has none: a step knows its own name).
var newerForms = map[string]string{
	"ScheduledFor": "${{ run.scheduled_for }}", "RunID": "${{ run.id }}", "Attempt": "${{ attempt }}",
	"Job": "${{ job.name }}", "Namespace": "${{ job.namespace }}",
}

// Hints lists what in a document still works but has a newer form: the
// {{ .Field }} references of command arguments, which ${{ }} expressions
// replace (docs/workflows.md). Positions as Decode's.
func (d *Document) Hints() Errors {
	var hs Errors
	for i, st := range d.Resource.Spec.Steps {
		c := st.Run.Command
		if c == nil {
			continue
		}
		for k, arg := range c.Argv {
			if k == 0 || !strings.Contains(arg, "{{") {
				continue
			}
			for name, newer := range newerForms {
				for _, ref := range []string{"{{ ." + name + " }}", "{{." + name + "}}"} {
					off := strings.Index(arg, ref)
					if off < 0 || off > 0 && arg[off-1] == '$' {
						continue
					}
					field := fmt.Sprintf("spec.steps[%d].run.command.argv[%d]", i, k)
					h := &FieldError{File: d.File, Field: field, Offset: off, Message: fmt.Sprintf("hint: %s is the older form of %s", ref, newer)}
					h.Line, h.Col = d.Position(field)
					if line, col, ok := d.valuePosition(field, off); ok && off > 0 {
						h.Line, h.Col = line, col
					}
					hs = append(hs, h)
				}
			}
		}
	}
	sort.SliceStable(hs, func(a, b int) bool {
		return hs[a].Line < hs[b].Line || hs[a].Line == hs[b].Line && hs[a].Col < hs[b].Col
	})
	return hs
}
