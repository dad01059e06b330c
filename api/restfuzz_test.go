package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/api"
)

// hostile are the values every parameter and body field is sent, one at
// a time: each of the wrong type for most fields, past a bound, or a
// JSON text where a scalar goes.
var hostile = []any{
	nil, "", "x", -1, 0.5, 1e300, "1e999", 9223372036854775807, "99999999999999999999", true,
	"true", "null", []any{}, []any{1, "a", nil}, map[string]any{}, map[string]any{"k": []any{}},
	strings.Repeat("é", 3000), "a\x00b", "../../etc/passwd", "JOB_STATUS_ACTIVE", "-1s", "2026-13-45T99:00:00Z",
}

// TestNoServerErrorForAClientsMistake walks every operation of the OpenAPI
// document, as the matrix does, and sends it hostile query strings, path
// values and bodies (from its parameters and its body's schema): every
// answer is a status the operation documents (or 2xx), never 500, with a
// JSON error that says what is wrong.
func TestNoServerErrorForAClientsMistake(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(api.OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	base, keys := authServer(t)
	admin := keys["admin"]
	hourly := strings.Replace(readmeJob, "0 2 * * *", "0 * * * *", 1) // a backfill of hours has instants
	code, _, body := rest(t, "POST", base+"/api/v1/jobs", admin, hourly)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	var created struct{ Job struct{ ID string } }
	_ = json.Unmarshal([]byte(body), &created)
	jobID := created.Job.ID
	_, _, body = rest(t, "POST", base+"/api/v1/jobs/"+jobID+"/trigger", admin, "")
	var trig struct{ Run struct{ ID string } }
	_ = json.Unmarshal([]byte(body), &trig)
	ago := func(h int) string { return time.Now().Add(-time.Duration(h) * time.Hour).UTC().Format(time.RFC3339) }
	_, _, body = rest(t, "POST", base+"/api/v1/jobs/"+jobID+"/backfills", admin, `{"from": "`+ago(5)+`", "to": "`+ago(2)+`"}`)
	var bf struct{ Backfill struct{ ID string } }
	_ = json.Unmarshal([]byte(body), &bf)
	if jobID == "" || trig.Run.ID == "" || bf.Backfill.ID == "" {
		t.Fatalf("the fixtures: job %q, run %q, backfill %q", jobID, trig.Run.ID, bf.Backfill.ID)
	}
	vars := map[string]string{"id": jobID, "namespace": "analytics", "name": "nightly-report",
		"run_id": trig.Run.ID, "backfill_id": bf.Backfill.ID, "tenant": "default", "prefix": "ork_nothing"}
	// A valid body for each operation that takes one; the mutations
	// change one thing of it at a time.
	spec := `{"schedule": {"cron": "0 * * * *"}, "run": {"command": {"argv": ["/bin/true"]}}}`
	meta := `{"namespace": "analytics", "name": "fuzzed", "labels": {"team": "data"}}`
	bodies := map[string]string{
		"JobService_CreateJob":           `{"metadata": ` + meta + `, "spec": ` + spec + `}`,
		"JobService_UpdateJob":           `{"spec": ` + spec + `}`,
		"JobService_PreviewSchedule":     `{"schedule": {"cron": "0 * * * *"}, "count": 2}`,
		"JobService_Backfill":            `{"from": "` + ago(5) + `", "to": "` + ago(2) + `", "dryRun": true}`,
		"RunService_TriggerJob":          `{"ignoreOverlap": true, "params": {}}`,
		"RunService_CancelRun":           `{"reason": "fuzz"}`,
		"RunService_ReplayDeadLetters":   `{"job": {"id": "` + jobID + `"}}`,
		"PipelineService_Plan":           `{"namespaces": ["analytics"], "jobs": [{"metadata": ` + meta + `, "spec": ` + spec + `}]}`,
		"PipelineService_Apply":          `{"namespaces": ["fuzz"], "jobs": [{"metadata": {"namespace": "fuzz", "name": "a"}, "spec": ` + spec + `}]}`,
		"PipelineService_Forecast":       `{"from": "` + ago(0) + `", "to": "` + ago(-24) + `"}`,
		"AccessService_CreateTenant":     `{"name": "fuzz"}`,
		"AccessService_SetTenantQuota":   `{"maxConcurrency": 10}`,
		"AccessService_CreateAPIKey":     `{"principal": "bot", "role": "reader"}`,
		"AccessService_GrantRole":        `{"principal": "bob", "namespace": "analytics", "role": "editor"}`,
		"AccessService_RevokeGrant":      `{"principal": "bob", "namespace": "analytics"}`,
		"WorkerService_Claim":            `{"worker": "w1", "types": ["echo"], "waitSeconds": 0}`,
		"WorkerService_Heartbeat":        `{"worker": "w1", "attempts": [{"taskId": "` + trig.Run.ID + `", "fencingToken": "1"}]}`,
		"WorkerService_Report":           `{"worker": "w1", "taskId": "` + trig.Run.ID + `", "fencingToken": "1", "success": true}`,
		"ProfileService_SetProfile":      `{"resources": {"cpu": "500m", "memory": "1Gi", "custom": {"licence": "1"}}}`,
		"AccessService_GetTenantQuota":   ``,
		"RunService_RetryRun":            `{"ignoreOverlap": true}`,
		"JobService_CancelBackfill":      `{}`,
		"JobService_PauseJob":            `{}`,
		"JobService_ResumeJob":           `{}`,
		"RunService_TriggerJobRunNow":    `{}`,
		"AccessService_RevokeAPIKey":     ``,
		"JobService_UpdateJobPut":        `{"metadata": ` + meta + `, "spec": ` + spec + `}`,
		"RunService_SummarizeRuns":       ``,
		"ClusterService_GetCluster":      ``,
		"AccessService_WhoAmI":           ``,
		"RunService_ListDeadLetters":     ``,
		"AlertService_ListAlerts":        ``,
		"AlertService_ListNotifications": ``,
	}
	// A redirect (a path with ".." is cleaned) is the server's answer,
	// not a request to follow.
	client := &http.Client{Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	sent, refused := 0, map[int]int{}
	type request struct{ method, url, key, body, what string }
	check := func(id string, documented []int, rq request) {
		t.Helper()
		req, err := http.NewRequest(rq.method, rq.url, strings.NewReader(rq.body))
		if err != nil {
			return // not a URL a client can send
		}
		if rq.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+rq.key)
		res, err := client.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", id, rq.what, err)
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		sent++
		if res.StatusCode < 400 {
			return
		}
		refused[res.StatusCode]++
		var st struct {
			Code    any    `json:"code"`
			Message string `json:"message"`
		}
		switch {
		case res.StatusCode >= 500:
			t.Errorf("%s %s: %d %s", id, rq.what, res.StatusCode, b)
		case !slices.Contains(documented, res.StatusCode):
			t.Errorf("%s %s: %d, which the document does not list (%v): %s", id, rq.what, res.StatusCode, documented, b)
		case res.StatusCode == http.StatusUnsupportedMediaType && strings.HasPrefix(id, "WorkerService_") && len(b) == 0:
			// Connect answers a body of no known type with no body.
		case json.Unmarshal(b, &st) != nil || st.Code == nil || st.Message == "":
			t.Errorf("%s %s: %d without a JSON error: %s", id, rq.what, res.StatusCode, b)
		}
	}

	paths := doc["paths"].(map[string]any)
	pathNames := make([]string, 0, len(paths))
	for p := range paths {
		pathNames = append(pathNames, p)
	}
	// Deletes last: what they delete the others use.
	sort.SliceStable(pathNames, func(i, j int) bool { return pathNames[i] < pathNames[j] })
	type operation struct {
		id, method, path string
		op               map[string]any
	}
	var ops []operation
	for _, p := range pathNames {
		for method, o := range paths[p].(map[string]any) {
			op := o.(map[string]any)
			ops = append(ops, operation{op["operationId"].(string), strings.ToUpper(method), p, op})
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].method != "DELETE" && ops[j].method == "DELETE" })
	for _, o := range ops {
		var documented []int
		for c := range o.op["responses"].(map[string]any) {
			if n, err := strconv.Atoi(c); err == nil {
				documented = append(documented, n)
			}
		}
		key := admin
		switch {
		case strings.HasPrefix(o.id, "WorkerService_"):
			key = keys["worker"]
		case strings.Contains(o.id, "Tenant"):
			key = keys["system"]
		}
		fill := func(vs map[string]string) string {
			p := o.path
			for k, v := range vs {
				p = strings.ReplaceAll(p, "{"+k+"}", url.PathEscape(v))
			}
			return base + p
		}
		valid := fill(vars)
		baseBody := bodies[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(o.id, "ByName"), "Put"), "InNamespace")]
		if o.op["requestBody"] == nil {
			baseBody = ""
		} else if baseBody == "" {
			baseBody = "{}"
		}
		var params []map[string]any
		if ps, ok := o.op["parameters"].([]any); ok {
			for _, p := range ps {
				params = append(params, p.(map[string]any))
			}
		}
		// Path values.
		for _, p := range params {
			if p["in"] != "path" {
				continue
			}
			name := p["name"].(string)
			for _, v := range []string{"", "x", "00000000-0000-0000-0000-000000000000", strings.Repeat("a", 2000), " ", "..", "a:b", "ü", "%", "a\x00b"} {
				vs := map[string]string{}
				for k, val := range vars {
					vs[k] = val
				}
				vs[name] = v
				check(o.id, documented, request{o.method, fill(vs), key, baseBody, fmt.Sprintf("path %s=%q", name, v)})
			}
		}
		// Query values: each documented parameter, and ones the document
		// does not have.
		queries := []string{"nosuch=1", "labels.team=data", "a.b.c=1", "ref.id=x", "job.id=x", "id=x", "pageSize=1&pageSize=2", "%zz=1", "=1", "&&&"}
		for _, p := range params {
			if p["in"] != "query" {
				continue
			}
			name := p["name"].(string)
			for _, v := range hostile {
				s := fmt.Sprint(v)
				if v == nil {
					s = ""
				}
				queries = append(queries, url.QueryEscape(name)+"="+url.QueryEscape(s))
			}
		}
		for _, q := range queries {
			if o.id == "WorkerService_Claim" {
				continue // Connect takes no query on a POST
			}
			check(o.id, documented, request{o.method, valid + "?" + q, key, baseBody, "query " + q})
		}
		if baseBody == "" {
			continue
		}
		// Whole bodies.
		for _, b := range []string{"", "{", "[]", "null", "1", `"s"`, `{"unknown": 1}`, strings.Repeat("[", 10000), `{"a":` + strings.Repeat(`{"a":`, 200), "\xff\xfe", `{"x": "\ud800"}`} {
			if o.id == "WorkerService_Claim" && (b == "" || b == "null") {
				continue // a claim without waitSeconds waits 20 s, as it should
			}
			check(o.id, documented, request{o.method, valid, key, b, fmt.Sprintf("body %.40q", b)})
		}
		// Each field of the valid body, and the fields its schema has,
		// one level down, set to each hostile value and left out.
		var fields map[string]any
		if err := json.Unmarshal([]byte(baseBody), &fields); err != nil {
			t.Fatalf("%s: the test's body: %v", o.id, err)
		}
		for _, path := range bodyPaths(doc, o.op, fields) {
			for _, v := range append(hostile, deleted{}) {
				if o.id == "WorkerService_Claim" && path[0] == "waitSeconds" {
					if _, ok := v.(deleted); ok || v == nil || v == "" || v == 0.5 || v == "true" || v == true {
						continue // the default wait (20 s) or a wait it takes
					}
				}
				b, err := json.Marshal(withValue(fields, path, v))
				if err != nil {
					t.Fatal(err)
				}
				check(o.id, documented, request{o.method, valid, key, string(b), fmt.Sprintf("body %s=%.40v", strings.Join(path, "."), v)})
			}
		}
	}
	t.Logf("%d requests: refused %v", sent, refused)
}

// deleted is a body mutation that leaves the field out.
type deleted struct{}

// bodyPaths are the field paths of an operation's body schema, one level
// into the objects it has, and the valid body's.
func bodyPaths(doc map[string]any, op map[string]any, valid map[string]any) [][]string {
	schema := resolve(doc, op["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any))
	seen := map[string]bool{}
	var out [][]string
	add := func(p []string) {
		if k := strings.Join(p, "."); !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	props, _ := schema["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	for n := range valid {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		add([]string{n})
		p, ok := props[n].(map[string]any)
		if !ok {
			continue
		}
		inner, _ := resolve(doc, p)["properties"].(map[string]any)
		innerNames := make([]string, 0, len(inner))
		for m := range inner {
			innerNames = append(innerNames, m)
		}
		sort.Strings(innerNames)
		for _, m := range innerNames {
			add([]string{n, m})
		}
	}
	return out
}

// resolve follows a schema's $ref (or allOf's first).
func resolve(doc map[string]any, s map[string]any) map[string]any {
	for range 10 {
		if all, ok := s["allOf"].([]any); ok && len(all) > 0 {
			s = all[0].(map[string]any)
		}
		r, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		s = doc["components"].(map[string]any)["schemas"].(map[string]any)[strings.TrimPrefix(r, "#/components/schemas/")].(map[string]any)
	}
	return s
}

// withValue copies body with the field at path set to v (or left out).
func withValue(body map[string]any, path []string, v any) map[string]any {
	out := make(map[string]any, len(body))
	for k, val := range body {
		out[k] = val
	}
	if len(path) == 1 {
		if _, ok := v.(deleted); ok {
			delete(out, path[0])
		} else {
			out[path[0]] = v
		}
		return out
	}
	inner, _ := out[path[0]].(map[string]any)
	out[path[0]] = withValue(inner, path[1:], v)
	return out
}
