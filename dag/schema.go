package dag

import (
	"encoding/json"
	"reflect"
	"strconv"

	"github.com/invopop/jsonschema"

	"github.com/orrery-dev/orrery/dag/schedule"
)

// JSONSchema returns a JSON Schema (draft 2020-12) of the Job resource, for
// editors that check YAML as people type (yaml-language-server:
// `# yaml-language-server: $schema=orrery-job.schema.json`). It is made from
// the Go types, so it cannot drift from what Decode accepts; Validate checks
// more (names, cron fields, cycles) than a schema can say.
func JSONSchema() ([]byte, error) {
	r := &jsonschema.Reflector{ExpandedStruct: true, DoNotReference: false, Mapper: scheduleTypes}
	s := r.Reflect(&Resource{})
	if st := s.Definitions["Step"]; st != nil { // a step runs (run) or parks (sleep, wait, approval): one of them
		st.Required = []string{"name"}
		st.OneOf = []*jsonschema.Schema{{Required: []string{"run"}}, {Required: []string{"sleep"}}, {Required: []string{"wait"}}, {Required: []string{"approval"}}}
	}
	s.ID = "https://orrery.dev/schemas/job.v1.json"
	s.Title = "Orrery Job"
	s.Description = "A job: a schedule and one step (run) or a DAG of steps. apiVersion orrery.dev/v1, kind Job."
	return json.MarshalIndent(s, "", "  ")
}

// scheduleTypes describes the types of package schedule that YAML writes
// as something other than their Go shape: a Duration is a string, a
// CronList a string or a list of strings.
func scheduleTypes(t reflect.Type) *jsonschema.Schema {
	switch t {
	case reflect.TypeFor[Duration]():
		return &jsonschema.Schema{Type: "string", Pattern: `^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`,
			Description: "a Go duration: 30s, 10m, 1h30m", Examples: []any{"30s", "10m", "1h30m"}}
	case reflect.TypeFor[schedule.CronList]():
		expr := &jsonschema.Schema{Type: "string", Description: "5 fields, or 6 with leading seconds; @daily-style descriptors; @every 90s"}
		return &jsonschema.Schema{OneOf: []*jsonschema.Schema{expr, {Type: "array", Items: expr, MaxItems: ptr(uint64(schedule.MaxCrons))}},
			Description: "a cron expression, or a list of them (their union, each instant once)"}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// JSONSchema describes a MinSuccess: a count or a percentage.
func (MinSuccess) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{OneOf: []*jsonschema.Schema{
		{Type: "integer", Minimum: json.Number("1"), Maximum: json.Number(strconv.Itoa(MaxItems))},
		{Type: "string", Pattern: `^([0-9]+|[0-9]{1,3}%)$`},
	}, Description: "how many items of the fan-out must succeed: a count, or a percentage of the items (\"95%\"); all of them when absent"}
}

// JSONSchema describes a Payload: any JSON value.
func (Payload) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Description: "any JSON value (in YAML, any value with a JSON form), at most 256 KiB, nested at most 64 levels deep, numbers within ±(2^53-1)"}
}
