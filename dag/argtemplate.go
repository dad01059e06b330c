package dag

import (
	"fmt"
	"slices"
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
