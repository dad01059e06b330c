package schedule

import (
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// CronList is a schedule's cron: one expression, or a list of them whose
// instants are the union (each instant once). YAML and JSON take a string
// or a list of strings; one expression is written back as a string.
type CronList []string

// Crons makes a CronList.
func Crons(exprs ...string) CronList { return CronList(exprs) }

func (c CronList) MarshalJSON() ([]byte, error) {
	if len(c) == 1 {
		return json.Marshal(c[0])
	}
	return json.Marshal([]string(c))
}

func (c *CronList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*c = CronList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("cron is an expression or a list of expressions")
	}
	*c = many
	return nil
}

func (c *CronList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*c = CronList{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make(CronList, 0, len(n.Content))
		for _, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: cron is an expression or a list of expressions", item.Line)
			}
			out = append(out, item.Value)
		}
		*c = out
		return nil
	}
	return fmt.Errorf("line %d: cron is an expression or a list of expressions", n.Line)
}

func (c CronList) MarshalYAML() (any, error) {
	if len(c) == 1 {
		return c[0], nil
	}
	return []string(c), nil
}

// field names expression i in errors: "cron" when there is one, else
// "cron[i]".
func (c CronList) field(i int) string {
	if len(c) == 1 {
		return "cron"
	}
	return fmt.Sprintf("cron[%d]", i)
}
