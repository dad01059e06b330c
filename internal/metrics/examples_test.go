package metrics_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var metricRE = regexp.MustCompile(`orrery_[a-z_]+`)

// defined are the metric names this package defines (its sources' string
// literals).
func defined(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, f := range []string{"metrics.go", "database.go", filepath.Join("..", "..", "engine", "worker", "capacity.go")} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`"(orrery_[a-z_]+)"`).FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
	}
	return out
}

// base is a series name without a histogram's suffix.
func base(name string) string {
	for _, s := range []string{"_bucket", "_count", "_sum"} {
		name = strings.TrimSuffix(name, s)
	}
	return name
}

// The alerting rules and the dashboard under docs/observability parse,
// and every metric they name exists; so does every metric of the README's
// table.
func TestExamplesNameExistingMetrics(t *testing.T) {
	names := defined(t)
	if len(names) < 11 {
		t.Fatalf("found %d metric names in the sources: %v", len(names), names)
	}
	dir := filepath.Join("..", "..", "docs", "observability")
	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(rules, &r); err != nil || len(r.Groups) == 0 || len(r.Groups[0].Rules) < 5 {
		t.Fatalf("alerts.yaml: %v %+v", err, r)
	}
	dash, err := os.ReadFile(filepath.Join(dir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(dash, &d); err != nil || len(d.Panels) < 6 {
		t.Fatalf("dashboard.json: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			exprs = append(exprs, rule.Expr)
		}
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricRE.FindAllString(e, -1) {
			used[base(m)] = true
			if !names[base(m)] {
				t.Errorf("%q names %s, which no code defines", e, m)
			}
		}
	}
	for n := range names {
		if !strings.Contains(string(readme), "`"+n+"`") {
			t.Errorf("the README's metrics table lacks %s", n)
		}
	}
	if len(used) < 8 {
		t.Errorf("the examples use only %d metrics: %v", len(used), used)
	}
}
