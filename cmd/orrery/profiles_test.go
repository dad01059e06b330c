package main_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A tenant admin manages resource profiles from the CLI; a job applied
// from YAML names one (and a step asks for its own resources); a profile
// a live job names is not deleted; another tenant sees none of them.
func TestProfilesFromTheCLI(t *testing.T) {
	_, asDefault, asAcme, asSys := twoTenants(t)
	if out, errOut, code := asAcme("profiles", "set", "gpu-large", "--cpu", "8", "--memory", "64Gi", "--gpu", "1", "--custom", "licence=2"); code != 0 ||
		!strings.Contains(out, "profile gpu-large: cpu 8, memory 64Gi, gpu 1, licence 2") {
		t.Fatalf("profiles set: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := asAcme("profiles", "set", "bad", "--memory", "-1Gi"); code == 0 || !strings.Contains(errOut, `resources.memory: "-1Gi" is negative`) {
		t.Errorf("a negative memory: exit %d %q", code, errOut)
	}
	if _, errOut, code := asAcme("profiles", "set", "bad", "--custom", "licence"); code == 0 || !strings.Contains(errOut, "NAME=COUNT") {
		t.Errorf("a custom count without a value: exit %d %q", code, errOut)
	}
	dir := t.TempDir()
	yaml := `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: trainer, namespace: ml}
spec:
  schedule: {cron: "0 3 * * *"}
  defaults:
    resources: {cpu: 500m, memory: 512Mi}
  steps:
    - name: train
      resource_profile: gpu-large
      run: {command: {argv: ["/bin/true"]}}
    - name: report
      needs: [train]
      resources: {cpu: 2, memory: 4Gi}
      run: {command: {argv: ["/bin/true"]}}
`
	if err := os.WriteFile(filepath.Join(dir, "trainer.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := asAcme("apply", "-f", dir); code != 0 {
		t.Fatalf("apply: exit %d %q %q", code, out, errOut)
	}
	if out, _, code := asAcme("profiles", "list"); code != 0 || !strings.Contains(out, "gpu-large") {
		t.Errorf("profiles list: %q", out)
	}
	// A run pins its tasks' resources when it is created: a later change
	// of the profile changes later runs only.
	trigger := func() string {
		t.Helper()
		out, errOut, code := asAcme("jobs", "trigger", "trainer", "-n", "ml", "--ignore-overlap")
		id := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`).FindString(out)
		if code != 0 || id == "" {
			t.Fatalf("trigger: exit %d %q %q", code, out, errOut)
		}
		return id
	}
	first := trigger()
	if _, errOut, code := asAcme("profiles", "set", "gpu-large", "--cpu", "4", "--memory", "32Gi"); code != 0 {
		t.Fatalf("change the profile: %q", errOut)
	}
	second := trigger()
	for id, want := range map[string]string{first: "needs cpu 8, memory 64Gi, gpu 1, licence 2", second: "needs cpu 4, memory 32Gi"} {
		out, errOut, code := asAcme("runs", "get", id)
		if code != 0 || !regexp.MustCompile(`task train .*`+want+`(  |\n)`).MatchString(out) || !strings.Contains(out, "needs cpu 2, memory 4Gi") {
			t.Errorf("runs get %s: exit %d %q %q; want train to %s and report its own", id, code, out, errOut, want)
		}
	}
	if _, errOut, code := asAcme("profiles", "delete", "gpu-large"); code == 0 || !strings.Contains(errOut, "ml/trainer names gpu-large") {
		t.Errorf("delete a profile a job names: exit %d %q", code, errOut)
	}
	if out, _, _ := asDefault("profiles", "list"); strings.Contains(out, "gpu-large") {
		t.Errorf("another tenant lists acme's profile: %q", out)
	}
	// A job naming a profile the tenant lacks is refused at apply, naming
	// the file, line and field.
	bad := strings.Replace(strings.Replace(yaml, "gpu-large", "gpu-huge", 1), "trainer", "trainer2", 1)
	if err := os.WriteFile(filepath.Join(dir, "trainer.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := asAcme("apply", "-f", dir); code == 0 || !strings.Contains(errOut, `trainer.yaml:10:7: spec.steps[0].resource_profile: no resource profile "gpu-huge"`) {
		t.Errorf("apply naming a missing profile: exit %d %q", code, errOut)
	}
	if _, errOut, code := asAcme("apply", "--dry-run", "-f", dir); code == 0 || !strings.Contains(errOut, `trainer.yaml:10:7: spec.steps[0].resource_profile: no resource profile "gpu-huge"`) {
		t.Errorf("the plan of a job naming a missing profile: exit %d %q (apply refuses it)", code, errOut)
	}
	// A quota in resources: a step or a profile asking more than it, alone,
	// is refused naming the field and the quota.
	if out, errOut, code := asSys("tenants", "set-quota", "acme", "--max-cpu", "6", "--max-custom", "licence=1"); code != 0 ||
		!strings.Contains(out, "resources at most cpu 6, licence 1") {
		t.Fatalf("set-quota --max-cpu: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := asAcme("profiles", "set", "huge", "--cpu", "8"); code == 0 || !strings.Contains(errOut, "resources.cpu: 8 is past the tenant's quota of 6") {
		t.Errorf("a profile past the quota: exit %d %q", code, errOut)
	}
	big := strings.Replace(strings.Replace(yaml, "resources: {cpu: 2, memory: 4Gi}", "resources: {cpu: 7, memory: 4Gi}", 1), "trainer", "trainer3", 1)
	big = strings.Replace(big, "      resource_profile: gpu-large\n", "", 1)
	if err := os.WriteFile(filepath.Join(dir, "trainer.yaml"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := asAcme("apply", "-f", dir); code == 0 || !strings.Contains(errOut, "spec.steps[1].resources.cpu: step report asks for cpu 7; the tenant's quota is 6") {
		t.Errorf("apply of a step past the quota: exit %d %q", code, errOut)
	}
	if _, errOut, code := asSys("tenants", "set-quota", "acme", "--max-cpu", "two"); code == 0 || !strings.Contains(errOut, `max_resources.cpu: "two" is not a quantity`) {
		t.Errorf("set-quota --max-cpu two: exit %d %q", code, errOut)
	}
	// A quota lowered below a live job's step is set, and names the job
	// whose step now waits until it is raised.
	if _, errOut, code := asSys("tenants", "set-quota", "acme", "--max-cpu", "3"); code != 0 ||
		!strings.Contains(errOut, "warning: 1 live jobs have a step asking more than the new quota on its own") ||
		!strings.Contains(errOut, "ml/trainer: spec.steps[0].resource_profile: step train asks for cpu 4; the tenant's quota is 3") {
		t.Errorf("set-quota below a live job's step: exit %d %q", code, errOut)
	}
}
