package dag

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/examples"
)

// FuzzDecode feeds YAML to Decode (decoding, unknown fields, positions,
// normalization and Validate) and checks that nothing panics, that every
// problem is reported with its file, and that whatever is accepted can be
// stored and fired: its schedule validates and has a next instant, its spec
// survives the JSON it is stored as, and its YAML form (`jobs get`)
// decodes to the same job. Seeds: testdata/fuzz/FuzzDecode and below.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(validJob))
	entries, err := examples.FS().ReadDir(".")
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		b, err := examples.FS().ReadFile(e.Name())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		jobWith(`{at: 0001-01-01T00:00:00Z}`, `{}`),
		jobWith(`{at: "9999-12-31T23:59:59Z"}`, `{}`),
		jobWith(`{cron: "0 0 31 2 *"}`, `{}`),
		jobWith(`{cron: "0 0 29 2 *", timezone: America/New_York}`, `{id: 9007199254740993}`),
		jobWith(`{cron: "@every 2562047h"}`, strings.Repeat("[", 70)+strings.Repeat("]", 70)),
		jobWith(`{cron: "*/7 * 29 2 */7"}`, `&a [*a]`),
		jobWith(`{cron: "@daily"}`, `{a: &x [1, 2], b: *x, c: !!binary aGVsbG8=, d: .inf, e: 2001-12-14t21:59:43.10-05:00}`),
		"apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  schedule: {cron: \"@daily\"}\n  steps:\n    - {name: a, needs: [b], run: {handler: h}}\n    - {name: b, needs: [a, a, c, b], run: {handler: h}}\n",
		"---\n---\nkind: [\n",
		"&a {spec: *a}\n",
		"metadata: !!map {name: 1}\nspec: {steps: [{run: {http: {url: ':'}}}]}\n",
		"",
	} {
		f.Add([]byte(s))
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, es := Decode("fuzz.yaml", data)
		for _, e := range es {
			if e.File != "fuzz.yaml" || e.Message == "" {
				t.Fatalf("error without file or message: %+v", e)
			}
		}
		if len(es) > 0 {
			return
		}
		for _, d := range docs {
			r := d.Resource
			if again := Validate(&r); len(again) > 0 {
				t.Fatalf("accepted, then invalid: %v", again)
			}
			s, err := schedule.Validate(r.Spec.Schedule)
			if err != nil {
				t.Fatalf("accepted schedule %+v: %v", r.Spec.Schedule, err)
			}
			if !s.OneTime() && len(r.Spec.Schedule.Cron) > 0 { // (after alone names no instants)
				if _, ok := s.Next(from); !ok {
					t.Fatalf("accepted schedule %+v never fires", r.Spec.Schedule)
				}
			}
			for i := range r.Spec.Steps {
				_ = r.Spec.Effective(i)
			}
			stored, err := json.Marshal(r.Spec)
			if err != nil {
				t.Fatalf("spec has no JSON form: %v", err)
			}
			var back JobSpec
			if err := json.Unmarshal(stored, &back); err != nil {
				t.Fatalf("stored spec does not load: %v\n%s", err, stored)
			}
			if again, _ := json.Marshal(back); !bytes.Equal(again, stored) {
				t.Fatalf("stored spec changed on loading:\n%s\n%s", stored, again)
			}
			text, err := yaml.Marshal(&r)
			if err != nil {
				t.Fatalf("no YAML form: %v", err)
			}
			redocs, res := Decode("again.yaml", text)
			if len(res) > 0 || len(redocs) != 1 {
				t.Fatalf("its YAML form does not decode: %v\n%s", res, text)
			}
			a, _ := json.Marshal(r)
			b, _ := json.Marshal(redocs[0].Resource)
			if !bytes.Equal(a, b) {
				t.Fatalf("YAML round trip changed the job:\n%s\n%s\n%s", a, b, text)
			}
		}
	})
}
