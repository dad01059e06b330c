package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	valerrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/orrery-dev/orrery/api"
)

// rest sends a REST request and answers its status, headers and body.
func rest(t *testing.T, method, url, key, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	req := restRequest(t, method, url, key, body, header...)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func restRequest(t *testing.T, method, url, key, body string, header ...string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// The README's curl, as a user types it.
const readmeJob = `{"metadata": {"namespace": "analytics", "name": "nightly-report"},
 "spec": {"schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
          "run": {"command": {"argv": ["/bin/echo", "report"]}}}}`

func TestREADMECurlOverREST(t *testing.T) {
	base, keys := authServer(t)
	k := keys["editor"]
	code, h, body := rest(t, "POST", base+"/api/v1/jobs", k, readmeJob)
	var created struct {
		Job struct {
			ID           string
			NextFireTime string
		}
	}
	if err := json.Unmarshal([]byte(body), &created); err != nil || code != http.StatusCreated || created.Job.ID == "" || created.Job.NextFireTime == "" {
		t.Fatalf("POST /api/v1/jobs: %d %s; want 201 with the job's id and next run", code, body)
	}
	if loc := h.Get("Location"); loc != "/api/v1/jobs/"+created.Job.ID {
		t.Errorf("Location %q, want /api/v1/jobs/%s", loc, created.Job.ID)
	}
	if code, _, body := rest(t, "GET", base+h.Get("Location"), k, ""); code != http.StatusOK || !strings.Contains(body, `"nightly-report"`) {
		t.Errorf("GET Location: %d %s", code, body)
	}
	// The same create under one key: the first answer again; another body
	// under that key: 409.
	if code, _, body := rest(t, "POST", base+"/api/v1/jobs", k, strings.Replace(readmeJob, "nightly-report", "keyed", 1), "Idempotency-Key", "c1"); code != http.StatusCreated {
		t.Fatalf("create with a key: %d %s", code, body)
	}
	if code, _, body := rest(t, "POST", base+"/api/v1/jobs", k, strings.Replace(readmeJob, "nightly-report", "keyed", 1), "Idempotency-Key", "c1"); code != http.StatusCreated {
		t.Errorf("create replayed: %d %s, want 201", code, body)
	}
	if code, _, body := rest(t, "POST", base+"/api/v1/jobs", k, strings.Replace(readmeJob, "nightly-report", "other", 1), "Idempotency-Key", "c1"); code != http.StatusConflict {
		t.Errorf("another body under the key: %d %s, want 409", code, body)
	}

	trigger := base + "/api/v1/jobs/" + created.Job.ID + "/trigger"
	var runs [2]struct{ Run struct{ ID, Trigger string } }
	for i := range runs {
		code, _, body := rest(t, "POST", trigger, k, "", "Idempotency-Key", "nightly-2026-11-28")
		if err := json.Unmarshal([]byte(body), &runs[i]); err != nil || code != http.StatusOK || runs[i].Run.ID == "" || runs[i].Run.Trigger != "manual" {
			t.Fatalf("trigger %d: %d %s", i, code, body)
		}
	}
	if runs[0].Run.ID != runs[1].Run.ID {
		t.Errorf("a trigger replayed under its Idempotency-Key started another run: %s, %s", runs[0].Run.ID, runs[1].Run.ID)
	}
	if code, _, body := rest(t, "POST", trigger, k, `{"idempotencyKey": "a"}`, "Idempotency-Key", "b"); code != http.StatusBadRequest || !strings.Contains(body, "idempotencyKey") {
		t.Errorf("a key in the body and another in the header: %d %s, want 400 naming idempotencyKey", code, body)
	}
	if code, _, body := rest(t, "GET", base+"/api/v1/runs/"+runs[0].Run.ID, k, ""); code != http.StatusOK || !strings.Contains(body, created.Job.ID) {
		t.Errorf("GET the run: %d %s", code, body)
	}
	// A job's runs by status, in the seed's capitals too.
	if code, _, body := rest(t, "GET", base+"/api/v1/jobs/"+created.Job.ID+"/runs?status=PENDING&since=2026-01-01T00:00:00Z", k, ""); code != http.StatusOK || !strings.Contains(body, runs[0].Run.ID) {
		t.Errorf("GET the job's pending runs: %d %s", code, body)
	}
}

// TestRESTErrorStatuses: each refusal's HTTP status, with nothing written.
func TestRESTErrorStatuses(t *testing.T) {
	base, keys := authServer(t)
	k := keys["admin"]
	code, _, body := rest(t, "POST", base+"/api/v1/jobs", k, readmeJob)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	var created struct{ Job struct{ ID string } }
	_ = json.Unmarshal([]byte(body), &created)
	job := base + "/api/v1/jobs/" + created.Job.ID
	for _, c := range []struct {
		name, method, url, key, body string
		code                         int
		want                         string
	}{
		{"malformed JSON", "POST", base + "/api/v1/jobs", k, "{\"metadata\":\n {\"name\": \"x\",}}", 400, "not valid JSON: invalid character '}' looking for beginning of object key string (line 2, column 15)"},
		{"malformed JSON after accents, the column in characters", "POST", base + "/api/v1/jobs", k, `{"metadata": {"description": "ééé",}}`, 400, "(line 1, column 36)"},
		{"a cut body", "POST", base + "/api/v1/jobs", k, `{"metadata":`, 400, "unexpected end of JSON input (line 1, column 13)"},
		{"a value of the wrong type", "POST", base + "/api/v1/jobs", k, `{"metadata": {"name": 5}}`, 400, "invalid value for string field name: 5 (line 1, column 23)"},
		{"a query value of the wrong type", "GET", base + "/api/v1/jobs?pageSize=ten", k, "", 400, `query parameter pageSize: "ten" is not an integer`},
		{"a value past a bound, named as sent", "GET", base + "/api/v1/jobs?pageSize=900", k, "", 422, "pageSize: 900 is outside 0..500"},
		{"a map in a query", "GET", base + "/api/v1/jobs?labels.team=data", k, "", 400, "labels is a map, which a query cannot give; give label=KEY:VALUE"},
		{"a parameter given twice", "GET", base + "/api/v1/jobs?namespace=a&namespace=b", k, "", 400, "namespace: given 2 times"},
		{"a number as JSON does not write it", "GET", base + "/api/v1/jobs?pageSize=05", k, "", 400, `query parameter pageSize: "05" is not an integer`},
		{"one parameter by both its names", "GET", base + "/api/v1/jobs?page_size=1&pageSize=2", k, "", 400, "given twice (as pageSize and page_size)"},
		{"a time past the year 9999", "GET", base + "/api/v1/runs?since=10000-01-01T00:00:00Z", k, "", 400, "is not an RFC 3339 time"},
		{"an enum's number not one of them", "GET", base + "/api/v1/jobs?status=7", k, "", 422, `"7" is not one of active`},
		{"a job status not one of them", "GET", base + "/api/v1/jobs?status=actve", k, "", 422, `"actve" is not one of active, paused, deleted`},
		{"a NUL in a path", "GET", base + "/api/v1/tenants/a%00b/quota", keys["system"], "", 422, "tenant: contains a NUL character"},
		{"an unknown field", "POST", base + "/api/v1/jobs", k, `{"metdata": {"name": "x"}}`, 400, "metdata: unknown field"},
		{"a nested unknown field", "POST", base + "/api/v1/jobs", k, strings.Replace(readmeJob, `"timezone"`, `"timezon"`, 1), 400, "spec.schedule.timezon: unknown field"},
		{"an unknown query parameter", "GET", base + "/api/v1/jobs?nmespace=x", k, "", 400, "nmespace"},
		{"a body where none is taken", "DELETE", job, k, `{"x": 1}`, 400, "no body"},
		{"a GET with a body", "GET", job, k, `{"ref": {"id": "x"}}`, 400, "a GET request has no body"},
		{"no key", "GET", base + "/api/v1/jobs", "", "", 401, "API key"},
		{"a reader deletes", "DELETE", job, keys["reader"], "", 403, "needs editor"},
		{"another tenant's job", "GET", job, keys["other"], "", 404, "not found"},
		{"no such path", "GET", base + "/api/v1/nowhere", k, "", 404, "no such path"},
		{"a method the path does not take", "PUT", base + "/api/v1/jobs", k, "{}", 405, "PUT is not an operation of this path; it takes GET, POST"},
		{"a message quoting megabytes, cut", "POST", base + "/api/v1/jobs", k, strings.Replace(readmeJob, "0 2 * * *", strings.Repeat("1", 3<<20), 1), 422, "... (cut: the message was 3145"},
		{"a name taken", "POST", base + "/api/v1/jobs", k, readmeJob, 409, "already exists"},
		{"a stale version", "PATCH", job, k, `{"expectedVersion": "7", "spec": {"schedule": {"cron": "0 3 * * *"}, "run": {"command": {"argv": ["/bin/true"]}}}}`, 409, "version"},
		{"a bad cron", "PATCH", job, k, `{"spec": {"schedule": {"cron": "0 25 * * *"}, "run": {"command": {"argv": ["/bin/true"]}}}}`, 422, "spec.schedule.cron"},
		{"a bad id", "GET", base + "/api/v1/runs/nope", k, "", 422, "run_id: not a UUID"},
		{"a bad job id, named as the path names it", "GET", base + "/api/v1/jobs/nope", k, "", 422, "id: not a UUID"},
		{"a bad status", "GET", base + "/api/v1/runs?status=FAILD", k, "", 422, "status"},
	} {
		code, _, body := rest(t, c.method, c.url, c.key, c.body)
		var st struct {
			Code    int
			Message string
		}
		if code != c.code || json.Unmarshal([]byte(body), &st) != nil || st.Code == 0 || !strings.Contains(st.Message, c.want) {
			t.Errorf("%s: %d %s; want %d with a JSON status naming %q", c.name, code, body, c.code, c.want)
		}
	}
	// Bodies vanguard would take unbounded or untyped are refused before
	// it reads them: compressed (a gzip bomb), declared past the limit,
	// not JSON (a browser's cross-site form); and a cross-site browser
	// request.
	for _, c := range []struct {
		name   string
		header []string
		code   int
	}{
		{"gzip", []string{"Content-Type", "application/json", "Content-Encoding", "gzip"}, 415},
		{"text/plain", []string{"Content-Type", "text/plain"}, 415},
		{"no type", []string{"Content-Type", ""}, 415},
		{"cross-site", []string{"Content-Type", "application/json", "Sec-Fetch-Site", "cross-site"}, 403},
		{"JSON with its charset", []string{"Content-Type", "application/json; charset=UTF-8"}, 200},
		{"JSON in capitals", []string{"Content-Type", "Application/JSON"}, 200},
	} {
		req := restRequest(t, "POST", job+"/trigger", k, "{}", c.header...)
		if c.header[1] == "" {
			req.Header.Del("Content-Type")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.code {
			t.Errorf("a trigger's body %s: %d, want %d", c.name, res.StatusCode, c.code)
		}
	}
	// A body of no declared length is cut at the limit, whoever reads it
	// first (the check of path-bound fields, or vanguard).
	for _, url := range []string{job + "/trigger", base + "/api/v1/jobs"} {
		big := io.MultiReader(strings.NewReader(`{"params": {"a": "`), strings.NewReader(strings.Repeat("x", 5<<20)), strings.NewReader(`"}}`))
		req, _ := http.NewRequest("POST", url, io.NopCloser(big))
		req.Header.Set("Authorization", "Bearer "+k)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a chunked body past the limit to %s: %d %s, want 413", url, res.StatusCode, b)
		}
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 4294967295\r\n\r\n{}", k)
	status, _ := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if !strings.Contains(status, " 413 ") {
		t.Errorf("a body declared 4 GiB long: %q, want 413", status)
	}
	if code, _, body := rest(t, "GET", job, k, ""); code != http.StatusOK || !strings.Contains(body, `"version": "1"`) && !strings.Contains(body, `"version":"1"`) {
		t.Errorf("after the refusals the job is not as created: %d %s", code, body)
	}
	// A state that refuses the call: 409.
	if code, _, _ := rest(t, "DELETE", job, k, ""); code != http.StatusOK {
		t.Fatalf("delete: %d", code)
	}
	if code, _, body := rest(t, "POST", job+"/trigger", k, ""); code != http.StatusConflict || !strings.Contains(body, "deleted") {
		t.Errorf("trigger a deleted job: %d %s, want 409", code, body)
	}
}

// Job lists filter by labels over REST: ?label=KEY:VALUE, repeatable,
// every one carried (a map in a query, ?labels.team=data, was a 500).
func TestJobListsFilterByLabel(t *testing.T) {
	base, keys := authServer(t)
	k := keys["admin"]
	for name, labels := range map[string]string{
		"a": `{"team": "data", "tier": "gold"}`, "b": `{"team": "data", "tier": "silver"}`, "c": `{"team": "web", "url": "http://x:1"}`,
	} {
		body := `{"metadata": {"name": "` + name + `", "labels": ` + labels + `}, "spec": {"schedule": {"cron": "0 * * * *"}, "run": {"command": {"argv": ["/bin/true"]}}}}`
		if code, _, out := rest(t, "POST", base+"/api/v1/jobs", k, body); code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, code, out)
		}
	}
	names := func(query string) string {
		t.Helper()
		code, _, body := rest(t, "GET", base+"/api/v1/jobs?"+query, k, "")
		var res struct {
			Jobs []struct{ Metadata struct{ Name string } }
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &res) != nil {
			return fmt.Sprintf("%d %s", code, body)
		}
		var out []string
		for _, j := range res.Jobs {
			out = append(out, j.Metadata.Name)
		}
		return strings.Join(out, ",")
	}
	for query, want := range map[string]string{
		"label=team:data":                 "a,b",
		"label=team:data&label=tier:gold": "a",
		"label=tier:gold&label=team:web":  "",
		"label=url:http://x:1":            "c", // the value holds colons
		"label=team%3Adata&status=active": "a,b",
		"label=team":                      `422 label[0]: \"team\" is not KEY:VALUE (team:data)`,
		"labels.team=data":                "400 query parameter labels.team: labels is a map",
	} {
		got := names(query)
		if code, msg, ok := strings.Cut(want, " "); ok && strings.HasPrefix(got, code) && strings.Contains(got, msg) {
			continue
		}
		if got != want {
			t.Errorf("?%s: %s, want %s", query, got, want)
		}
	}
}

// op is one REST operation of the matrix: how to call it so that it
// succeeds.
type op struct {
	id   string // operationId
	key  string // the key that may (admin when empty)
	vars map[string]string
	body string
	code int // 200 when 0
	// readerOK: a reader of the tenant may call it; others answer a reader
	// 403.
	readerOK bool
	// tenantScoped: it names a resource of the tenant, which another
	// tenant's admin does not find (404).
	tenantScoped bool
}

// TestRESTMatrix calls every operation of the OpenAPI document: once as
// it succeeds (its request and answer checked against the document, but
// for the paths with a custom verb, {id}:pause, which the validator does
// not match: their status is checked),
// without a key (401), as a reader where a reader may not (403), and as
// another tenant's admin where it names a resource (404).
func TestRESTMatrix(t *testing.T) {
	doc, err := libopenapi.NewDocument(api.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("the OpenAPI document: %s", e.Message)
		}
		t.FailNow()
	}
	base, keys := authServer(t)
	restMatrix(t, base, keys, func(t *testing.T, r route, req *http.Request, resp *http.Response, what string) {
		t.Helper()
		// The validator does not match a path with a custom verb
		// (/api/v1/jobs/{id}:pause): those are checked by their status
		// here, and through Prism in TestOpenAPIWithTheToolsUsersBring.
		if strings.Contains(r.path, "}:") {
			return
		}
		validate := v.ValidateHttpRequestResponse
		if what != "" { // the request is refused on purpose: only the answer is checked
			validate = func(req *http.Request, resp *http.Response) (bool, []*valerrors.ValidationError) {
				return v.ValidateHttpResponse(req, resp)
			}
		}
		if ok, verrs := validate(req, resp); !ok {
			for _, e := range verrs {
				t.Errorf("%s %s%s: not as documented: %s (%s)", r.method, req.URL.Path, what, e.Message, e.Reason)
				for _, s := range e.SchemaValidationErrors {
					t.Errorf("  %s at %s", s.Reason, s.FieldPath)
				}
			}
		}
	})
}

// route is an operation's method and path template.
type route struct{ method, path string }

// answerCheck checks one answer of the matrix against the document: req
// is the request as sent (a body-less one with {}, as the document has
// it), resp the answer with its body; what says how the request was
// refused on purpose ("" for the call that should succeed).
type answerCheck func(t *testing.T, r route, req *http.Request, resp *http.Response, what string)

// restMatrix calls every operation of the OpenAPI document through base
// (the server, or a proxy in front of it), as a user of it would: each
// without a key (401), as a reader when a reader may not (403), as
// another tenant when it names a resource (404), and as one who may, with
// the status it should answer; check sees each answer.
func restMatrix(t *testing.T, base string, keys map[string]string, check answerCheck) {
	doc, err := libopenapi.NewDocument(api.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]route{}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, o := range item.GetOperations().FromOldest() {
			routes[o.OperationId] = route{strings.ToUpper(method), path}
		}
	}

	admin := keys["admin"]
	mustCreate := func(name string) string {
		code, _, body := rest(t, "POST", base+"/api/v1/jobs", admin, strings.Replace(readmeJob, "nightly-report", name, 1))
		var c struct{ Job struct{ ID string } }
		if json.Unmarshal([]byte(body), &c) != nil || code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, code, body)
		}
		return c.Job.ID
	}
	jobID := mustCreate("nightly-report")
	delByID, _ := mustCreate("delete-by-id"), mustCreate("delete-by-name")
	ids := map[string]string{}
	capture := func(name, body, field string) {
		var m map[string]any
		_ = json.Unmarshal([]byte(body), &m)
		for _, f := range strings.Split(field, ".") {
			switch x := m[f].(type) {
			case map[string]any:
				m = x
			case string:
				ids[name] = x
			}
		}
	}
	ago := func(h int) string { return time.Now().Add(-time.Duration(h) * time.Hour).UTC().Format(time.RFC3339) }
	spec := `{"schedule": {"cron": "0 * * * *"}, "run": {"command": {"argv": ["/bin/true"]}}}`
	meta := `{"namespace": "analytics", "name": "nightly-report", "labels": {"team": "data"}}`
	byID := map[string]string{"id": jobID}
	byName := map[string]string{"namespace": "analytics", "name": "nightly-report"}
	ops := []op{
		{id: "JobService_CreateJob", body: strings.Replace(readmeJob, "nightly-report", "created", 1), code: 201},
		{id: "JobService_GetJob", vars: byID, readerOK: true, tenantScoped: true},
		{id: "JobService_GetJobByName", vars: byName, readerOK: true, tenantScoped: true},
		{id: "JobService_ListJobs", readerOK: true},
		{id: "JobService_ListJobsInNamespace", vars: map[string]string{"namespace": "analytics"}, readerOK: true},
		{id: "JobService_UpdateJob", vars: byID, body: `{"spec": ` + spec + `}`, tenantScoped: true},
		{id: "JobService_UpdateJobPut", vars: byID, body: `{"expectedVersion": "$VERSION", "metadata": ` + meta + `, "spec": ` + spec + `}`, tenantScoped: true},
		{id: "JobService_UpdateJobByName", vars: byName, body: `{"spec": ` + spec + `}`, tenantScoped: true},
		{id: "JobService_UpdateJobByNamePut", vars: byName, body: `{"expectedVersion": "$VERSION", "metadata": ` + meta + `, "spec": ` + spec + `}`, tenantScoped: true},
		{id: "JobService_PauseJob", vars: byID, tenantScoped: true},
		{id: "JobService_ResumeJob", vars: byID, tenantScoped: true},
		{id: "JobService_PauseJobByName", vars: byName, body: "{}", tenantScoped: true},
		{id: "JobService_ResumeJobByName", vars: byName, body: "{}", tenantScoped: true},
		{id: "JobService_PreviewSchedule", body: `{"schedule": {"cron": "0 * * * *"}, "count": 2}`, readerOK: true},
		{id: "JobService_Backfill", vars: byID, body: `{"from": "` + ago(5) + `", "to": "` + ago(2) + `", "dryRun": true}`, tenantScoped: true},
		{id: "JobService_BackfillByName", vars: byName, body: `{"from": "` + ago(5) + `", "to": "` + ago(2) + `"}`, tenantScoped: true},
		{id: "JobService_ListBackfills", vars: byID, readerOK: true, tenantScoped: true},
		{id: "JobService_ListBackfillsByName", vars: byName, readerOK: true, tenantScoped: true},
		{id: "JobService_CancelBackfill", vars: byID, tenantScoped: true},
		{id: "JobService_CancelBackfillByName", vars: byName, code: 409, tenantScoped: true}, // already cancelled
		{id: "RunService_TriggerJob", vars: byID, tenantScoped: true},
		{id: "RunService_TriggerJobByName", vars: byName, body: `{"ignoreOverlap": true}`, tenantScoped: true},
		{id: "RunService_TriggerJobRunNow", vars: byID, body: `{"ignoreOverlap": true}`, tenantScoped: true},
		{id: "RunService_ListRuns", readerOK: true},
		{id: "RunService_ListRunsOfJob", vars: byID, readerOK: true, tenantScoped: true},
		{id: "RunService_ListRunsOfJobByName", vars: byName, readerOK: true, tenantScoped: true},
		{id: "RunService_GetRun", readerOK: true, tenantScoped: true},
		{id: "RunService_CancelRun", body: `{"reason": "matrix"}`, tenantScoped: true},
		{id: "RunService_RetryRun", body: `{"ignoreOverlap": true}`, tenantScoped: true},
		// (the run's job asks for no approval: its steps are not found)
		{id: "RunService_ApproveStep", vars: map[string]string{"step": "sign-off"}, body: `{"comment": "matrix"}`, code: 404, readerOK: true, tenantScoped: true},
		{id: "RunService_RejectStep", vars: map[string]string{"step": "sign-off"}, code: 404, readerOK: true, tenantScoped: true},
		{id: "RunService_ListDeadLetters", readerOK: true},
		{id: "RunService_SummarizeRuns", readerOK: true},
		{id: "RunService_ReplayDeadLetters", body: `{"job": {"id": "` + jobID + `"}}`},
		{id: "ClusterService_GetCluster", readerOK: true},
		{id: "PipelineService_Plan", body: `{"namespaces": ["analytics"], "jobs": [{"metadata": ` + meta + `, "spec": ` + spec + `}]}`, readerOK: true},
		{id: "PipelineService_Apply", body: `{"namespaces": ["analytics"], "jobs": [{"metadata": ` + meta + `, "spec": ` + spec + `}]}`},
		{id: "PipelineService_Forecast", body: `{"from": "` + ago(0) + `", "to": "` + ago(-24) + `"}`, readerOK: true},
		{id: "AuditService_ListAudit"},
		{id: "AlertService_ListAlerts", readerOK: true},
		{id: "AlertService_ListNotifications", readerOK: true},
		{id: "AccessService_WhoAmI", readerOK: true},
		{id: "AccessService_CreateTenant", key: "system", body: `{"name": "matrix"}`},
		{id: "AccessService_ListTenants", key: "system"},
		{id: "AccessService_SetTenantQuota", key: "system", vars: map[string]string{"tenant": "matrix"}, body: `{"maxConcurrency": 10}`},
		{id: "AccessService_GetTenantQuota", key: "system", vars: map[string]string{"tenant": "matrix"}},
		{id: "AccessService_CreateAPIKey", body: `{"principal": "bot", "role": "reader"}`},
		{id: "AccessService_ListAPIKeys"},
		{id: "AccessService_RevokeAPIKey"},
		{id: "AccessService_GrantRole", body: `{"principal": "bob", "namespace": "analytics", "role": "editor"}`},
		{id: "AccessService_ListGrants"},
		{id: "AccessService_RevokeGrant", body: `{"principal": "bob", "namespace": "analytics"}`},
		{id: "EventService_Publish", body: `{"type": "order.paid", "id": "matrix-1", "data": {"order": 7, "amount": 120.5}}`},
		{id: "EventService_Publish", key: "publisher", body: `{"type": "order.paid", "id": "matrix-2", "time": "` + ago(1) + `"}`},
		{id: "ProfileService_SetProfile", vars: map[string]string{"name": "gpu-large"}, body: `{"resources": {"cpu": "8", "memory": "64Gi", "gpu": "1"}}`},
		{id: "ProfileService_GetProfile", vars: map[string]string{"name": "gpu-large"}, readerOK: true, tenantScoped: true},
		{id: "ProfileService_ListProfiles", readerOK: true},
		{id: "ProfileService_DeleteProfile", vars: map[string]string{"name": "gpu-large"}, tenantScoped: true},
		{id: "SourceService_CreateSource", body: `{"name": "github", "kind": "github", "secret": "secret://env/GITHUB_HOOK_SECRET"}`},
		{id: "SourceService_ListSources", readerOK: true},
		{id: "SourceService_DeleteSource", vars: map[string]string{"name": "github"}, tenantScoped: true},
		// A worker's calls, over Connect's JSON: a claim that finds nothing
		// and a quiet heartbeat answer {}; a report for an attempt that
		// does not exist is 404.
		{id: "WorkerService_Claim", key: "worker", body: `{"worker": "w1", "types": ["echo"], "waitSeconds": 0}`},
		{id: "WorkerService_Heartbeat", key: "worker", body: `{"worker": "w1"}`},
		{id: "WorkerService_Report", key: "worker", body: `{"worker": "w1", "taskId": "01a2266e-0000-7000-8000-000000000000", "fencingToken": "1", "success": true}`, code: 404},
		{id: "JobService_DeleteJob", vars: map[string]string{"id": delByID}, tenantScoped: true},
		{id: "JobService_DeleteJobByName", vars: map[string]string{"namespace": "analytics", "name": "delete-by-name"}, tenantScoped: true},
	}
	var called []string
	for _, o := range ops {
		r, ok := routes[o.id]
		if !ok {
			t.Errorf("%s: not in the OpenAPI document", o.id)
			continue
		}
		called = append(called, o.id)
		vars := map[string]string{"run_id": ids["run"], "backfill_id": ids["backfill"], "prefix": ids["prefix"]}
		for k, v := range o.vars {
			vars[k] = v
		}
		path := r.path
		for k, v := range vars {
			path = strings.ReplaceAll(path, "{"+k+"}", v)
		}
		if strings.Contains(path, "{") {
			t.Fatalf("%s: %s has a variable the test does not fill", o.id, path)
		}
		url := base + path
		key := admin
		if o.key != "" {
			key = keys[o.key]
		}
		if strings.Contains(o.body, "$VERSION") {
			_, _, body := rest(t, "GET", url, admin, "")
			var j struct{ Job struct{ Version string } }
			_ = json.Unmarshal([]byte(body), &j)
			o.body = strings.ReplaceAll(o.body, "$VERSION", j.Job.Version)
		}
		// Every answer, an error or not, is as the document says: its
		// status is one the operation lists, its body of that status's
		// schema.
		send := func(who, key string, want int) (int, []byte) {
			t.Helper()
			req := restRequest(t, r.method, url, key, o.body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s %s%s: %d %s, want %d", r.method, path, who, resp.StatusCode, b, want)
				return resp.StatusCode, b
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
			body := o.body
			if body == "" && r.method != "GET" && r.method != "DELETE" {
				body = "{}" // what was sent without a body, as the document has it
			}
			check(t, r, restRequest(t, r.method, url, key, body), resp, who)
			return resp.StatusCode, b
		}
		send(" without a key", "", http.StatusUnauthorized)
		if !o.readerOK {
			send(" as a reader", keys["reader"], http.StatusForbidden)
		}
		if o.tenantScoped {
			send(" as another tenant's admin", keys["other"], http.StatusNotFound)
		}
		want := o.code
		if want == 0 {
			want = http.StatusOK
		}
		code, b := send("", key, want)
		if code != want {
			continue
		}
		switch o.id {
		case "RunService_TriggerJob":
			capture("run", string(b), "run.id")
		case "JobService_BackfillByName":
			capture("backfill", string(b), "backfill.id")
		case "AccessService_CreateAPIKey":
			capture("prefix", string(b), "key.prefix")
		}
	}
	// The summary counts the caller's tenant only.
	c1, _, mine := rest(t, "GET", base+"/api/v1/runs:summarize", admin, "")
	c2, _, theirs := rest(t, "GET", base+"/api/v1/runs:summarize", keys["other"], "")
	if c1 != http.StatusOK || c2 != http.StatusOK || !strings.Contains(mine, `"pending"`) || strings.Contains(theirs, `"pending"`) || strings.Contains(theirs, "nightly-report") {
		t.Errorf("the summaries of two tenants:\nmine %s\ntheirs %s", mine, theirs)
	}
	var missing []string
	for id := range routes {
		if !slices.Contains(called, id) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Errorf("operations of the document the matrix does not call: %s", strings.Join(missing, ", "))
	}
	fmt.Fprint(io.Discard, len(called))
}

// A field a path binds comes from the path only: a query parameter or a
// body field that gives it too is refused, 400 naming it, and nothing is
// done (DELETE /api/v1/jobs/A?ref.id=B deleted B, A staying active).
func TestPathBoundFieldsComeFromThePath(t *testing.T) {
	t.Parallel()
	base, keys := authServer(t)
	k := keys["editor"]
	create := func(name string) string {
		t.Helper()
		code, _, body := rest(t, "POST", base+"/api/v1/jobs", k, strings.Replace(readmeJob, "nightly-report", name, 1))
		var created struct{ Job struct{ ID string } }
		if err := json.Unmarshal([]byte(body), &created); err != nil || code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, code, body)
		}
		return created.Job.ID
	}
	a, b := create("job-a"), create("job-b")
	code, _, body := rest(t, "POST", base+"/api/v1/jobs/"+a+"/trigger", k, "")
	var trig struct{ Run struct{ ID string } }
	if err := json.Unmarshal([]byte(body), &trig); err != nil || code != http.StatusOK {
		t.Fatalf("trigger: %d %s", code, body)
	}
	for _, tt := range []struct{ method, path, body, want string }{
		{"DELETE", "/api/v1/jobs/" + a + "?ref.id=" + b, "", "query parameter ref.id: the path gives it (DELETE /api/v1/jobs/{id})"},
		{"GET", "/api/v1/jobs/" + a + "?ref.id=" + b, "", "query parameter ref.id"},
		{"POST", "/api/v1/jobs/" + a + ":pause?ref.id=" + b, "", "query parameter ref.id"},
		{"GET", "/api/v1/runs/" + trig.Run.ID + "?id=" + a, "", "query parameter id"},
		{"GET", "/api/v1/namespaces/analytics/jobs/job-a?ref.name=job-b", "", "query parameter ref.name"},
		{"GET", "/api/v1/jobs/" + a + "/runs?job.id=" + b, "", "query parameter job.id"},
		{"GET", "/api/v1/jobs/" + a + "?ref.namespace=analytics&ref.name=job-b", "", "query parameter ref."},
		{"PATCH", "/api/v1/jobs/" + a, `{"ref": {"name": "job-b"}, "expectedVersion": 1, "metadata": {"description": "x"}}`, "body field ref: the path gives it"},
		{"PATCH", "/api/v1/jobs/" + a, `{"ref": {"id": "` + b + `"}, "expectedVersion": 1, "metadata": {"description": "x"}}`, "body field ref: the path gives it"},
		{"POST", "/api/v1/runs/" + trig.Run.ID + ":cancel", `{"id": "` + a + `"}`, "body field id"},
		// A path that leaves its variable empty is routed all the same:
		// the query must not fill it in.
		{"DELETE", "/api/v1/jobs/?ref.id=" + b, "", "path parameter id is empty"},
		{"GET", "/api/v1/namespaces/analytics/jobs/?ref.name=job-b", "", "path parameter name is empty"},
		{"POST", "/api/v1/jobs/:pause?ref.id=" + b, "", "path parameter id is empty"},
		{"POST", "/api/v1/runs/:cancel?id=" + trig.Run.ID, "", "path parameter run_id is empty"},
		{"POST", "/api/v1/runs/:cancel", `{"id": "` + trig.Run.ID + `"}`, "path parameter run_id is empty"},
	} {
		code, _, body := rest(t, tt.method, base+tt.path, k, tt.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("%s %s: %d %s; want 400 with %q", tt.method, tt.path, code, body, tt.want)
		}
	}
	for _, id := range []string{a, b} {
		if code, _, body := rest(t, "GET", base+"/api/v1/jobs/"+id, k, ""); code != http.StatusOK || !strings.Contains(body, `"JOB_STATUS_ACTIVE"`) {
			t.Errorf("job %s after the refusals: %d %.200s; want it active, unchanged", id, code, body)
		}
	}
	// What the path does not bind stays the query's.
	if code, _, body := rest(t, "GET", base+"/api/v1/jobs/"+a+"?history=1", k, ""); code != http.StatusOK {
		t.Errorf("GET with another query parameter: %d %s", code, body)
	}
}
