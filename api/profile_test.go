package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Resource profiles over REST: a tenant admin sets, replaces and deletes
// them (audited); any role reads them; a job naming one that does not
// exist is refused naming the field; one a live job names cannot be
// deleted (409 naming the job) until the job is; bad quantities are 422
// naming the field, with nothing written.
func TestResourceProfiles(t *testing.T) {
	t.Parallel()
	base, keys := authServer(t)
	admin, editor, reader := keys["admin"], keys["editor"], keys["reader"]
	put := func(key, name, body string) (int, string) {
		t.Helper()
		code, _, b := rest(t, "PUT", base+"/api/v1/profiles/"+name, key, body)
		return code, b
	}
	if code, b := put(admin, "gpu-large", `{"resources": {"cpu": "8", "memory": "64Gi", "gpu": "1"}}`); code != http.StatusOK ||
		!strings.Contains(b, `"cpu":"8"`) || !strings.Contains(b, `"memory":"64Gi"`) {
		t.Fatalf("set: %d %s", code, b)
	}
	if code, b := put(admin, "gpu-large", `{"resources": {"cpu": "8000m", "memory": "65536Mi", "gpu": "2", "custom": {"licence": "1"}}}`); code != http.StatusOK ||
		!strings.Contains(b, `"gpu":"2"`) || !strings.Contains(b, `"licence":"1"`) {
		t.Fatalf("replace: %d %s", code, b)
	}
	for _, c := range []struct {
		key, name, body string
		code            int
		want            string
	}{
		{reader, "x", `{"resources": {"cpu": "1"}}`, 403, "needs admin"},
		{editor, "x", `{"resources": {"cpu": "1"}}`, 403, "needs admin"},
		{admin, "x", `{"resources": {"cpu": "-1"}}`, 422, `resources.cpu: \"-1\" is negative`},
		{admin, "x", `{"resources": {"memory": "lots"}}`, 422, `resources.memory: \"lots\" is not a quantity`},
		{admin, "x", `{"resources": {"custom": {"Licence": "1"}}}`, 422, "resources.custom"},
		{admin, "x", `{"resources": {"cpu": "0"}}`, 422, "at least one resource"},
		{admin, "x", `{}`, 422, "resources: required"},
		{admin, "Bad_Name", `{"resources": {"cpu": "1"}}`, 422, "name:"},
	} {
		if code, b := put(c.key, c.name, c.body); code != c.code || !strings.Contains(b, c.want) {
			t.Errorf("PUT %s %s: %d %s; want %d with %q", c.name, c.body, code, b, c.code, c.want)
		}
	}
	if code, _, b := rest(t, "GET", base+"/api/v1/profiles", reader, ""); code != http.StatusOK || strings.Count(b, `"name"`) != 1 {
		t.Errorf("list as a reader: %d %s; want the one profile", code, b)
	}
	if code, _, b := rest(t, "GET", base+"/api/v1/profiles/gpu-large", keys["other"], ""); code != http.StatusNotFound {
		t.Errorf("another tenant's profile: %d %s", code, b)
	}

	spec := func(profile string) string {
		named := ""
		if profile != "" {
			named = fmt.Sprintf(`"resourceProfile": %q, `, profile)
		}
		return `{"schedule": {"cron": "0 2 * * *"}, "defaults": {"resources": {"cpu": "500m"}},
		  "steps": [{"name": "train", ` + named + `"run": {"command": {"argv": ["/bin/true"]}}},
		            {"name": "report", "needs": ["train"], "run": {"command": {"argv": ["/bin/true"]}}}]}`
	}
	job := func(name, profile string) string {
		return fmt.Sprintf(`{"metadata": {"namespace": "analytics", "name": %q}, "spec": %s}`, name, spec(profile))
	}
	if code, _, b := rest(t, "POST", base+"/api/v1/jobs", editor, job("trainer", "gpu-huge")); code != http.StatusUnprocessableEntity ||
		!strings.Contains(b, `spec.steps[0].resourceProfile: no resource profile \"gpu-huge\" in this tenant`) {
		t.Errorf("a job naming a missing profile: %d %s", code, b)
	}
	code, _, b := rest(t, "POST", base+"/api/v1/jobs", editor, job("trainer", "gpu-large"))
	var created struct{ Job struct{ ID string } }
	if json.Unmarshal([]byte(b), &created) != nil || code != http.StatusCreated {
		t.Fatalf("a job naming gpu-large: %d %s", code, b)
	}
	if code, _, b := rest(t, "DELETE", base+"/api/v1/profiles/gpu-large", admin, ""); code != http.StatusConflict || !strings.Contains(b, "analytics/trainer names gpu-large") {
		t.Errorf("delete a profile a live job names: %d %s; want 409 naming it", code, b)
	}
	// Changed to name none and back, then deleted: the job holds it no more.
	if code, _, b := rest(t, "PATCH", base+"/api/v1/jobs/"+created.Job.ID, editor, `{"spec": `+spec("")+`}`); code != http.StatusOK {
		t.Fatalf("update: %d %s", code, b)
	}
	if code, _, b := rest(t, "PATCH", base+"/api/v1/jobs/"+created.Job.ID, editor, `{"spec": `+spec("gpu-large")+`}`); code != http.StatusOK {
		t.Fatalf("update back: %d %s", code, b)
	}
	if code, _, b := rest(t, "DELETE", base+"/api/v1/jobs/"+created.Job.ID, editor, ""); code != http.StatusOK {
		t.Fatalf("delete the job: %d %s", code, b)
	}
	if code, _, b := rest(t, "DELETE", base+"/api/v1/profiles/gpu-large", admin, ""); code != http.StatusOK || !strings.Contains(b, `"gpu":"2"`) {
		t.Errorf("delete the profile once no job names it: %d %s", code, b)
	}
	if code, _, b := rest(t, "DELETE", base+"/api/v1/profiles/gpu-large", admin, ""); code != http.StatusNotFound {
		t.Errorf("delete it again: %d %s", code, b)
	}
	code, _, b = rest(t, "GET", base+"/api/v1/audit", admin, "")
	for _, action := range []string{"set_profile", "delete_profile"} {
		if code != http.StatusOK || !strings.Contains(b, action) {
			t.Errorf("audit: %d, no %s in %.400s", code, action, b)
		}
	}
}
