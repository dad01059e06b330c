package dag

import (
	"strings"
	"testing"
)

// A step asks for its own resources or profile, else the defaults'.
func TestStepResources(t *testing.T) {
	y := strings.Replace(validJob, "    retry: {max_attempts: 3, initial: 10s, max: 10m}\n",
		"    retry: {max_attempts: 3, initial: 10s, max: 10m}\n    resources: {cpu: 500m, memory: 512Mi}\n", 1)
	y = strings.Replace(y, "      payload: {source: pos}\n", "      payload: {source: pos}\n      resource_profile: gpu-large\n", 1)
	y = strings.Replace(y, "      queue: warehouse\n", "      queue: warehouse\n      resources: {cpu: 2, memory: 4Gi, gpu: 0, custom: {licence: 1}}\n", 1)
	docs, errs := Decode("etl.yaml", []byte(y))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	s := &docs[0].Resource.Spec
	for i, want := range []string{"profile gpu-large", "cpu 500m, memory 512Mi", "cpu 2, memory 4Gi, licence 1", "cpu 500m, memory 512Mi"} {
		e := s.Effective(i)
		got := e.Resources.String()
		if e.ResourceProfile != "" {
			got = "profile " + e.ResourceProfile
		}
		if got != want {
			t.Errorf("%s: %s, want %s", s.Steps[i].Name, got, want)
		}
	}
	if got := s.Profiles(); len(got) != 1 || got[0] != "gpu-large" {
		t.Errorf("Profiles: %v", got)
	}
}

func TestStepResourcesRefused(t *testing.T) {
	withStep := func(extra string) string {
		return strings.Replace(validJob, "      queue: warehouse\n", "      queue: warehouse\n"+extra, 1)
	}
	for _, c := range []struct{ yaml, want string }{
		{withStep("      resources: {cpu: -1}\n"), `etl.yaml:26:19: spec.steps[2].resources.cpu: "-1" is negative`},
		{withStep("      resources: {memory: 20Ti}\n"), `spec.steps[2].resources.memory: "20Ti" is past the bound of 16Ti`},
		{withStep("      resources: {gpu: 0.5}\n"), `spec.steps[2].resources.gpu: "0.5" is not a whole count`},
		{withStep("      resources: {custom: {Licence: 1}}\n"), `spec.steps[2].resources.custom: "Licence" is not a resource name`},
		{withStep("      resources: {disk: 1}\n"), `spec.steps[2].resources.disk: unknown field "disk"`},
		{withStep("      resources: {cpu: [1]}\n"), `a quantity is a number or a string`},
		{withStep("      resources: {cpu: 1}\n      resource_profile: big\n"), `spec.steps[2].resources: give resources or resource_profile, not both`},
		{withStep("      resource_profile: Big One\n"), `spec.steps[2].resource_profile: "Big One" must start`},
		{strings.Replace(validJob, "    queue: etl\n", "    queue: etl\n    resources: {cpu: lots}\n", 1), `etl.yaml:13:17: spec.defaults.resources.cpu: "lots" is not a quantity`},
	} {
		_, errs := Decode("etl.yaml", []byte(c.yaml))
		if len(errs) == 0 || !strings.Contains(errs.Error(), c.want) {
			t.Errorf("%s: %v", c.want, errs)
		}
	}
}
