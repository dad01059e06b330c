package dag

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/invopop/jsonschema"
	"go.yaml.in/yaml/v3"

	"github.com/orrery-dev/orrery/dag/resources"
)

// Resources is what a step needs (docs/resources.md): quantities as
// Kubernetes writes them, cpu in cores (500m, 2), memory in bytes (512Mi,
// 4Gi), gpu and each custom resource a count.
type Resources struct {
	CPU    Quantity            `json:"cpu,omitempty" yaml:"cpu,omitempty"`
	Memory Quantity            `json:"memory,omitempty" yaml:"memory,omitempty"`
	GPU    Quantity            `json:"gpu,omitempty" yaml:"gpu,omitempty"`
	Custom map[string]Quantity `json:"custom,omitempty" yaml:"custom,omitempty"`
}

// Quantity is a resource's amount as written: a string (500m, 4Gi) or a
// number (2) in YAML and JSON.
type Quantity string

func (q *Quantity) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a quantity is a number or a string such as 500m or 4Gi", n.Line)
	}
	*q = Quantity(n.Value)
	return nil
}

// UnmarshalJSON takes a string or a number.
func (q *Quantity) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*q = Quantity(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("a quantity is a number or a string such as 500m or 4Gi")
	}
	*q = Quantity(n.String())
	return nil
}

// Spec is r as the resources package reads it.
func (r *Resources) Spec() resources.Spec {
	s := resources.Spec{CPU: string(r.CPU), Memory: string(r.Memory), GPU: string(r.GPU)}
	if len(r.Custom) > 0 {
		s.Custom = make(map[string]string, len(r.Custom))
		for name, q := range r.Custom {
			s.Custom[name] = string(q)
		}
	}
	return s
}

// Vector parses r (nil: none).
func (r *Resources) Vector() (resources.Vector, error) {
	if r == nil {
		return resources.Vector{}, nil
	}
	return resources.Parse(r.Spec())
}

// validateResources checks a step's (or the defaults') resources and
// profile, p being its field path.
func validateResources(es *Errors, p string, r *Resources, profile string) {
	if r != nil && profile != "" {
		es.add(p+".resources", "give resources or resource_profile, not both")
	}
	if profile != "" {
		if err := ValidateName(profile); err != nil {
			es.add(p+".resource_profile", "%v", err)
		}
	}
	if _, err := r.Vector(); err != nil {
		for _, e := range unjoin(err) {
			var fe *resources.FieldError
			if errors.As(e, &fe) {
				es.add(p+".resources."+fe.Field, "%s", fe.Message)
			} else {
				es.add(p+".resources", "%v", e)
			}
		}
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Profiles are the resource profiles a normalized spec names, sorted,
// each once.
func (s *JobSpec) Profiles() []string {
	var out []string
	if s.Defaults.ResourceProfile != "" {
		out = append(out, s.Defaults.ResourceProfile)
	}
	for i := range s.Steps {
		if p := s.Steps[i].ResourceProfile; p != "" {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// JSONSchema describes a Quantity: a number, or a string with a unit.
func (Quantity) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{OneOf: []*jsonschema.Schema{
		{Type: "number", Minimum: json.Number("0")},
		{Type: "string", Pattern: `^[0-9]+(\.[0-9]+)?([eE][0-9]+|m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$`, MaxLength: ptr(uint64(32))},
	}, Description: "a quantity as Kubernetes writes one: cpu in cores (500m, 2), memory in bytes (512Mi, 4Gi), counts as numbers", Examples: []any{"500m", "4Gi", 2}}
}
