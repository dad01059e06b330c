package dag

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	raw, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("job.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("job.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// yamlDocs turns each YAML document into the JSON value a schema checks.
func yamlDocs(t *testing.T, data []byte) []any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []any
	for {
		var v any
		if err := dec.Decode(&v); err != nil {
			break
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		j, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		out = append(out, j)
	}
	return out
}

func TestSchemaAcceptsTheExamplesAndRejectsUnknownFields(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("../examples/*.yaml")
	if len(files) < 3 {
		t.Fatalf("examples: %v", files)
	}
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, doc := range yamlDocs(t, data) {
			if err := s.Validate(doc); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
	}
	bad := strings.Replace(validJob, "  overlap: skip\n", "  overlap: sometimes\n  retries: 3\n", 1)
	for _, doc := range yamlDocs(t, []byte(bad)) {
		err := s.Validate(doc)
		if err == nil || !strings.Contains(err.Error(), "retries") || !strings.Contains(err.Error(), "/spec/overlap") {
			t.Fatalf("the schema let through an unknown field and a bad enum: %v", err)
		}
	}
}
