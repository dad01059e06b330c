package dag

import (
	"encoding/json"

	"github.com/invopop/jsonschema"
)

// JSONSchema returns a JSON Schema (draft 2020-12) of the Job resource, for
// editors that check YAML as people type (yaml-language-server:
// `# yaml-language-server: $schema=orrery-job.schema.json`). It is made from
// the Go types, so it cannot drift from what Decode accepts; Validate checks
// more (names, cron fields, cycles) than a schema can say.
func JSONSchema() ([]byte, error) {
	r := &jsonschema.Reflector{ExpandedStruct: true, DoNotReference: false}
	s := r.Reflect(&Resource{})
	s.ID = "https://orrery.dev/schemas/job.v1.json"
	s.Title = "Orrery Job"
	s.Description = "A job: a schedule and one step (run) or a DAG of steps. apiVersion orrery.dev/v1, kind Job."
	return json.MarshalIndent(s, "", "  ")
}

// JSONSchema describes a Duration.
func (Duration) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Pattern: `^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`,
		Description: "a Go duration: 30s, 10m, 1h30m", Examples: []any{"30s", "10m", "1h30m"}}
}

// JSONSchema describes a Payload: any JSON value.
func (Payload) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Description: "any JSON value (in YAML, any value with a JSON form), at most 256 KiB, nested at most 64 levels deep, numbers within ±(2^53-1)"}
}
