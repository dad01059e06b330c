package dag

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Fan-out (for_each): a step that runs once per element of a list known
// only when the step would be released (docs/dynamic-workflows.md).

// ItemStep names item i of a fan-out step: STEP[i].
func ItemStep(step string, i int) string { return step + "[" + strconv.Itoa(i) + "]" }

// StepOfItem is the step an item's task name belongs to (STEP of
// STEP[i]); ok is false for a name that is not an item's.
func StepOfItem(name string) (step string, i int, ok bool) {
	if !strings.HasSuffix(name, "]") {
		return name, 0, false
	}
	k := strings.LastIndexByte(name, '[')
	if k <= 0 {
		return name, 0, false
	}
	n, err := strconv.Atoi(name[k+1 : len(name)-1])
	if err != nil || n < 0 {
		return name, 0, false
	}
	return name[:k], n, true
}

// MinSuccess is how many items of a fan-out must succeed for its step to
// succeed: a count ("19", or 19 in YAML and JSON; a count past the items
// asks for all of them) or a percentage of the items, rounded up ("95%").
type MinSuccess string

// UnmarshalYAML takes a count or a percentage, as a scalar.
func (m *MinSuccess) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: min_success is a count (19) or a percentage (\"95%%\")", n.Line)
	}
	*m = MinSuccess(n.Value)
	return nil
}

// UnmarshalJSON takes a count (a number) or a string.
func (m *MinSuccess) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*m = MinSuccess(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("min_success is a count (19) or a percentage (\"95%\")")
	}
	*m = MinSuccess(n.String())
	return nil
}

// parse reads m: a count, or a percentage (pct set).
func (m MinSuccess) parse() (n int, pct bool, err error) {
	s := string(m)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		s, pct = p, true
	}
	n, err = strconv.Atoi(s)
	switch {
	case err != nil || strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") && n == 0:
		return 0, false, fmt.Errorf("%q is not a count (19) or a percentage (\"95%%\")", string(m))
	case pct && (n < 1 || n > 100):
		return 0, false, fmt.Errorf("%q: a percentage is 1%%..100%%", string(m))
	case !pct && (n < 1 || n > MaxItems):
		return 0, false, fmt.Errorf("%q: a count is 1..%d", string(m), MaxItems)
	}
	return n, pct, nil
}

// Need is how many of total items must succeed (all when m is empty).
func (m MinSuccess) Need(total int) int {
	n, pct, err := m.parse()
	switch {
	case m == "" || err != nil:
		return total
	case pct:
		return (total*n + 99) / 100
	}
	return min(n, total)
}

// MaxItems bounds the items of one fan-out, and its max_parallel.
const MaxItems = 10_000
