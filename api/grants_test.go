package api_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// grantsFixture is a tenant with jobs team-a/a1, team-a/a2, team-b/b1 and
// team-b/b2, one run of each, and the keys of authServer.
type grantsFixture struct {
	t    *testing.T
	base string
	keys map[string]string
	jobs map[string]string // "ns/name" -> id
	runs map[string]string // "ns/name" -> run id
}

func newGrantsFixture(t *testing.T) *grantsFixture {
	t.Helper()
	base, keys := authServer(t)
	f := &grantsFixture{t: t, base: base, keys: keys, jobs: map[string]string{}, runs: map[string]string{}}
	for _, j := range []string{"team-a/a1", "team-a/a2", "team-b/b1", "team-b/b2"} {
		ns, name, _ := strings.Cut(j, "/")
		var created struct {
			Job struct{ ID string } `json:"job"`
		}
		f.ok(&created, keys["admin"], "JobService/CreateJob", `{"metadata":{"name":"`+name+`","namespace":"`+ns+`"},"spec":{"schedule":{"cron":"@daily"},"run":{"handler":"h"}}}`)
		var triggered struct {
			Run struct{ ID string } `json:"run"`
		}
		f.ok(&triggered, keys["admin"], "RunService/TriggerJob", `{"job":{"id":"`+created.Job.ID+`"}}`)
		f.jobs[j], f.runs[j] = created.Job.ID, triggered.Run.ID
	}
	return f
}

// key creates a key for principal with a tenant-wide role, as the admin.
func (f *grantsFixture) key(principal, role string) string {
	var created struct{ Secret string }
	f.ok(&created, f.keys["admin"], "AccessService/CreateAPIKey", `{"principal":"`+principal+`","role":"`+role+`"}`)
	return created.Secret
}

// grant gives principal role on ns (and job, if any) as key.
func (f *grantsFixture) grant(key, principal, role, ns, job string) {
	f.ok(nil, key, "AccessService/GrantRole", `{"principal":"`+principal+`","role":"`+role+`","namespace":"`+ns+`","job":"`+job+`"}`)
}

// ok calls method and fails the test unless it succeeds; the answer goes
// into out (when not nil).
func (f *grantsFixture) ok(out any, key, method, body string) {
	f.t.Helper()
	code, b := callBody(f.t, f.base+"/orrery.v1."+method, key, body)
	if code != "" {
		f.t.Fatalf("%s %s: %s %s", method, body, code, b)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			f.t.Fatal(err)
		}
	}
}

// code is the Connect error code of a call ("" when it succeeds).
func (f *grantsFixture) code(key, method, body string) string {
	f.t.Helper()
	code, _ := callBody(f.t, f.base+"/orrery.v1."+method, key, body)
	return code
}

// listed returns the "ns/name" of the jobs, or of the runs' jobs, a list
// call shows.
func (f *grantsFixture) listed(key, method string) []string {
	f.t.Helper()
	var out struct {
		Jobs []struct {
			Metadata struct{ Namespace, Name string } `json:"metadata"`
		} `json:"jobs"`
		Runs []struct{ Namespace, Job string } `json:"runs"`
	}
	f.ok(&out, key, method, `{}`)
	var got []string
	for _, j := range out.Jobs {
		got = append(got, j.Metadata.Namespace+"/"+j.Metadata.Name)
	}
	for _, r := range out.Runs {
		got = append(got, r.Namespace+"/"+r.Job)
	}
	slices.Sort(got)
	return got
}

func ref(id string) string { return `{"ref":{"id":"` + id + `"}}` }

// A key with no tenant-wide role acts where its principal is granted a
// role, on a namespace or on one job, and nowhere else; its lists show
// only that. Each RPC that names a job, a run or tasks by id is decided on
// the job it points at.
func TestGrantsOnNamespacesAndJobs(t *testing.T) {
	t.Parallel()
	f := newGrantsFixture(t)
	admin := f.keys["admin"]
	alice := f.key("alice", "none")

	// Before any grant: nothing at all, lists included.
	for _, m := range []string{"JobService/ListJobs", "RunService/ListRuns", "RunService/ListDeadLetters"} {
		if code := f.code(alice, m, `{}`); code != "permission_denied" {
			t.Errorf("%s with no role anywhere: %q", m, code)
		}
	}
	if code := f.code(alice, "JobService/GetJob", ref(f.jobs["team-a/a1"])); code != "not_found" {
		t.Errorf("get by id with no role: %q", code)
	}

	f.grant(admin, "alice", "editor", "team-a", "")
	f.grant(admin, "alice", "reader", "team-b", "b1")

	if got := f.listed(alice, "JobService/ListJobs"); !slices.Equal(got, []string{"team-a/a1", "team-a/a2", "team-b/b1"}) {
		t.Errorf("alice lists jobs %v", got)
	}
	var who struct {
		Tenant, Principal, Role string
		Grants                  []struct{ Namespace, Job, Role string }
	}
	f.ok(&who, alice, "AccessService/WhoAmI", `{}`)
	if who.Tenant != "default" || who.Principal != "alice" || who.Role != "none" || len(who.Grants) != 2 ||
		who.Grants[0].Namespace != "team-a" || who.Grants[1].Job != "b1" || who.Grants[1].Role != "reader" {
		t.Errorf("alice's WhoAmI: %+v", who)
	}
	if got := f.listed(alice, "RunService/ListRuns"); !slices.Equal(got, []string{"team-a/a1", "team-a/a2", "team-b/b1"}) {
		t.Errorf("alice lists runs of %v", got)
	}
	for _, c := range []struct {
		method, body, want string
	}{
		{"JobService/GetJob", ref(f.jobs["team-b/b1"]), ""},
		{"JobService/GetJob", `{"ref":{"namespace":"team-b","name":"b1"}}`, ""},
		// An id it may not read is NotFound, as a missing one (below).
		{"JobService/GetJob", ref(f.jobs["team-b/b2"]), "not_found"},
		{"JobService/PauseJob", ref(f.jobs["team-b/b2"]), "not_found"},
		{"JobService/GetJob", `{"ref":{"namespace":"team-b","name":"b2"}}`, "permission_denied"},
		{"JobService/GetJob", `{"ref":{"namespace":"team-b","name":"nope"}}`, "permission_denied"},
		{"RunService/ListRuns", `{"job":{"namespace":"team-b","name":"b2"}}`, "permission_denied"},
		{"RunService/ListRuns", `{"job":{"namespace":"team-b","name":"nope"}}`, "permission_denied"},
		{"RunService/ListDeadLetters", `{"job":{"id":"` + f.jobs["team-b/b2"] + `"}}`, "not_found"},
		{"RunService/ListRuns", `{"job":{"namespace":"team-b","name":"b1"}}`, ""},
		// The nil UUID names no job (it once read as "no filter"): it needs
		// the tenant-wide role, and is refused even then.
		{"RunService/ReplayDeadLetters", `{"job":{"id":"00000000-0000-0000-0000-000000000000"}}`, "permission_denied"},
		{"JobService/PauseJob", ref(f.jobs["team-a/a1"]), ""},
		{"JobService/ResumeJob", `{"ref":{"namespace":"team-a","name":"a1"}}`, ""},
		{"JobService/PauseJob", ref(f.jobs["team-b/b1"]), "permission_denied"},
		{"JobService/CreateJob", `{"metadata":{"name":"new","namespace":"team-a"},"spec":{"schedule":{"cron":"@daily"},"run":{"handler":"h"}}}`, ""},
		{"JobService/CreateJob", `{"metadata":{"name":"new","namespace":"team-c"},"spec":{"schedule":{"cron":"@daily"},"run":{"handler":"h"}}}`, "permission_denied"},
		// A step runs only a job its author may trigger (editor): b1 it only reads.
		{"JobService/CreateJob", `{"metadata":{"name":"calls-b1","namespace":"team-a"},"spec":{"schedule":{"cron":"@daily"},"run":{"job":{"name":"b1","namespace":"team-b"}}}}`, "invalid_argument"},
		{"JobService/CreateJob", `{"metadata":{"name":"calls-a2","namespace":"team-a"},"spec":{"schedule":{"cron":"@daily"},"run":{"job":{"name":"a2"}}}}`, ""},
		{"RunService/TriggerJob", `{"job":{"id":"` + f.jobs["team-a/a2"] + `"}}`, ""},
		{"RunService/TriggerJob", `{"job":{"id":"` + f.jobs["team-b/b1"] + `"}}`, "permission_denied"},
		{"RunService/GetRun", `{"id":"` + f.runs["team-b/b1"] + `"}`, ""},
		{"RunService/GetRun", `{"id":"` + f.runs["team-b/b2"] + `"}`, "not_found"},
		{"RunService/CancelRun", `{"id":"` + f.runs["team-b/b1"] + `"}`, "permission_denied"},
		{"RunService/CancelRun", `{"id":"` + f.runs["team-a/a1"] + `"}`, ""},
		{"RunService/ReplayDeadLetters", `{}`, "permission_denied"},
		{"RunService/ReplayDeadLetters", `{"job":{"namespace":"team-a","name":"a1"}}`, "permission_denied"}, // admin's
		{"PipelineService/Apply", `{"jobs":[{"metadata":{"name":"a3","namespace":"team-a"},"spec":{"schedule":{"cron":"@daily"},"run":{"handler":"h"}}}]}`, ""},
		{"PipelineService/Apply", `{"jobs":[{"metadata":{"name":"b3","namespace":"team-b"},"spec":{"schedule":{"cron":"@daily"},"run":{"handler":"h"}}}]}`, "permission_denied"},
		{"PipelineService/Plan", `{"prune":true,"namespaces":["team-b"]}`, "permission_denied"},
		{"PipelineService/Plan", `{"jobs":[{"metadata":{"name":"b1","namespace":"team-b"},"spec":{"schedule":{"cron":"@daily"},"run":{"handler":"h"}}}]}`, ""},
		{"AuditService/ListAudit", `{}`, "permission_denied"},
		{"AlertService/ListAlerts", `{"job":{"namespace":"team-a","name":"a1"}}`, ""},
		{"AlertService/ListAlerts", `{"job":{"namespace":"team-b","name":"b2"}}`, "permission_denied"},
		{"AlertService/ListNotifications", `{}`, ""},
		{"AccessService/ListAPIKeys", `{}`, "permission_denied"},
		{"AccessService/GrantRole", `{"principal":"alice","role":"admin","namespace":"team-a"}`, "permission_denied"},
		{"ClusterService/GetCluster", `{}`, ""},
		{"JobService/PreviewSchedule", `{"schedule":{"cron":"@daily"},"count":1}`, ""},
		{"JobService/Backfill", `{"ref":{"id":"` + f.jobs["team-b/b1"] + `"},"from":"2026-01-01T00:00:00Z","to":"2026-01-02T00:00:00Z","dry_run":true}`, "permission_denied"},
		{"JobService/ListBackfills", ref(f.jobs["team-a/a1"]), ""},
		// Another tenant's ids and names are NotFound, as missing ones.
		{"JobService/GetJob", ref("0190aaaa-0000-7000-8000-000000000000"), "not_found"},
	} {
		if code := f.code(alice, c.method, c.body); code != c.want {
			t.Errorf("alice: %s %s: %q, want %q", c.method, c.body, code, c.want)
		}
	}

	if code := f.code(admin, "RunService/ReplayDeadLetters", `{"job":{"id":"00000000-0000-0000-0000-000000000000"}}`); code != "invalid_argument" {
		t.Errorf("replay with the nil job id as admin: %q", code)
	}
	// What a denied id answers is what a missing id answers.
	_, denied := callBody(t, f.base+"/orrery.v1.RunService/GetRun", alice, `{"id":"`+f.runs["team-b/b2"]+`"}`)
	_, missing := callBody(t, f.base+"/orrery.v1.RunService/GetRun", alice, `{"id":"0190aaaa-0000-7000-8000-000000000001"}`)
	if strings.ReplaceAll(denied, f.runs["team-b/b2"], "ID") != strings.ReplaceAll(missing, "0190aaaa-0000-7000-8000-000000000001", "ID") {
		t.Errorf("a denied run id answers %s; a missing one %s", denied, missing)
	}

	// The most permissive applicable role wins: a tenant reader with an
	// editor grant on one job edits that job only.
	bob := f.key("bob", "reader")
	f.grant(admin, "bob", "editor", "team-b", "b2")
	if code := f.code(bob, "JobService/PauseJob", ref(f.jobs["team-b/b2"])); code != "" {
		t.Errorf("bob pauses the job he edits: %q", code)
	}
	if code := f.code(bob, "JobService/PauseJob", ref(f.jobs["team-b/b1"])); code != "permission_denied" {
		t.Errorf("bob pauses a job he only reads: %q", code)
	}
	if got := f.listed(bob, "JobService/ListJobs"); len(got) != 7 {
		t.Errorf("a tenant reader lists %v", got)
	}

	// Revoked, the grant stops at once on this server.
	f.ok(nil, admin, "AccessService/RevokeGrant", `{"principal":"alice","namespace":"team-a"}`)
	if got := f.listed(alice, "JobService/ListJobs"); !slices.Equal(got, []string{"team-b/b1"}) {
		t.Errorf("after the revocation alice lists %v", got)
	}
	if code := f.code(alice, "JobService/PauseJob", `{"ref":{"namespace":"team-a","name":"a1"}}`); code != "permission_denied" {
		t.Errorf("after the revocation alice pauses: %q", code)
	}
	if code := f.code(admin, "AccessService/RevokeGrant", `{"principal":"alice","namespace":"team-a"}`); code != "not_found" {
		t.Errorf("revoking a grant that is gone: %q", code)
	}
}

// A namespace admin grants, revokes and lists in its namespace only; the
// tenant's admin sees every grant; another tenant sees none; every change
// is audited with the role before and after; bad arguments name the field.
func TestGrantManagement(t *testing.T) {
	t.Parallel()
	f := newGrantsFixture(t)
	admin := f.keys["admin"]
	carol := f.key("carol", "none")
	f.grant(admin, "carol", "admin", "team-a", "")

	f.grant(carol, "dave", "reader", "team-a", "")
	f.grant(carol, "dave", "editor", "team-a", "") // replaces
	f.grant(carol, "erin", "editor", "team-a", "a1")
	for _, c := range []struct{ method, body, want string }{
		{"AccessService/GrantRole", `{"principal":"dave","role":"reader","namespace":"team-b"}`, "permission_denied"},
		{"AccessService/GrantRole", `{"principal":"dave","role":"reader","namespace":"team-b","job":"b1"}`, "permission_denied"},
		{"AccessService/ListGrants", `{}`, "permission_denied"},
		{"AccessService/ListGrants", `{"namespace":"team-b"}`, "permission_denied"},
		{"AccessService/ListGrants", `{"namespace":"team-a"}`, ""},
		{"AccessService/CreateAPIKey", `{"principal":"x","role":"none"}`, "permission_denied"},
		{"RunService/ReplayDeadLetters", `{"job":{"namespace":"team-a","name":"a1"}}`, ""},
	} {
		if code := f.code(carol, c.method, c.body); code != c.want {
			t.Errorf("carol (admin of team-a): %s %s: %q, want %q", c.method, c.body, code, c.want)
		}
	}
	var listed struct {
		Grants []struct{ Principal, Namespace, Job, Role, CreatedBy string } `json:"grants"`
	}
	f.ok(&listed, admin, "AccessService/ListGrants", `{"page_size":2}`)
	if len(listed.Grants) != 2 {
		t.Fatalf("first page of 2: %+v", listed.Grants)
	}
	f.ok(&listed, admin, "AccessService/ListGrants", `{"namespace":"team-a"}`)
	var got []string
	for _, g := range listed.Grants {
		got = append(got, g.Namespace+"/"+g.Job+" "+g.Principal+" "+g.Role)
	}
	if want := []string{"team-a/ carol admin", "team-a/ dave editor", "team-a/a1 erin editor"}; !slices.Equal(got, want) {
		t.Errorf("grants of team-a: %v, want %v", got, want)
	}
	if code, body := callBody(t, f.base+"/orrery.v1.AccessService/ListGrants", f.keys["other"], `{}`); code != "" || strings.Contains(body, "team-a") {
		t.Errorf("another tenant lists our grants: %s %s", code, body)
	}
	// Another tenant's namespace of the same name is another namespace.
	if code, body := callBody(t, f.base+"/orrery.v1.AccessService/GrantRole", f.keys["other"], `{"principal":"carol","role":"admin","namespace":"team-b"}`); code != "" {
		t.Fatalf("grant in another tenant: %s %s", code, body)
	}
	if code := f.code(carol, "JobService/PauseJob", `{"ref":{"namespace":"team-b","name":"b1"}}`); code != "permission_denied" {
		t.Errorf("a grant in another tenant reached this one: %q", code)
	}

	var audit struct {
		Entries []struct {
			Action, TargetKind, TargetName, Actor string
			Changes                               []struct{ Path, Before, After string }
		} `json:"entries"`
	}
	f.ok(&audit, admin, "AuditService/ListAudit", `{"target_kind":"grant"}`)
	var trail []string
	for _, e := range audit.Entries {
		trail = append(trail, e.Action+" "+e.TargetName)
	}
	if len(audit.Entries) != 4 || audit.Entries[1].TargetName != "dave on team-a" || !strings.HasPrefix(audit.Entries[1].Actor, "carol (ork_") {
		t.Fatalf("grant audit trail: %v (%+v)", trail, audit.Entries)
	}
	var roleChange string
	for _, c := range audit.Entries[1].Changes {
		if c.Path == "role" {
			roleChange = c.Before + " -> " + c.After
		}
	}
	if roleChange != `"reader" -> "editor"` {
		t.Errorf("dave's second grant: role change %q; entries %+v", roleChange, audit.Entries[1])
	}

	for _, c := range []struct{ body, field string }{
		{`{"principal":"","role":"reader","namespace":"team-a"}`, "principal"},
		{`{"principal":"p","role":"owner","namespace":"team-a"}`, "role"},
		{`{"principal":"p","role":"reader","namespace":"Team A"}`, "namespace"},
		{`{"principal":"p","role":"reader","namespace":"team-a","job":"a/b"}`, "job"},
	} {
		code, body := callBody(t, f.base+"/orrery.v1.AccessService/GrantRole", admin, c.body)
		var e struct{ Message string }
		_ = json.Unmarshal([]byte(body), &e)
		if code != "invalid_argument" || !strings.HasPrefix(e.Message, c.field+":") {
			t.Errorf("grant %s: %q %s, want invalid_argument naming %s", c.body, code, body, c.field)
		}
	}
}

// A system admin creates and lists tenants and makes a tenant's first
// admin key; that key acts in its tenant only. Nobody else manages
// tenants or makes keys outside its own tenant.
func TestSystemAdminCreatesTenants(t *testing.T) {
	t.Parallel()
	f := newGrantsFixture(t)
	system := f.keys["system"]
	var created struct{ Tenant struct{ Name, ID string } }
	f.ok(&created, system, "AccessService/CreateTenant", `{"name":"acme"}`)
	if created.Tenant.Name != "acme" || created.Tenant.ID == "" {
		t.Fatalf("created %+v", created)
	}
	if code := f.code(system, "AccessService/CreateTenant", `{"name":"acme"}`); code != "already_exists" {
		t.Errorf("the same tenant again: %q", code)
	}
	if code, body := callBody(t, f.base+"/orrery.v1.AccessService/CreateTenant", system, `{"name":"Acme Inc"}`); code != "invalid_argument" || !strings.Contains(body, "name:") {
		t.Errorf("a bad tenant name: %q %s", code, body)
	}
	var key struct{ Secret string }
	f.ok(&key, system, "AccessService/CreateAPIKey", `{"tenant":"acme","principal":"acme-admin","role":"admin"}`)
	if got := f.listed(key.Secret, "JobService/ListJobs"); len(got) != 0 {
		t.Errorf("acme's admin lists %v", got)
	}
	if code := f.code(key.Secret, "JobService/GetJob", ref(f.jobs["team-a/a1"])); code != "not_found" {
		t.Errorf("acme's admin gets a default-tenant job: %q", code)
	}
	var tenants struct{ Tenants []struct{ Name string } }
	f.ok(&tenants, system, "AccessService/ListTenants", `{}`)
	var names []string
	for _, tn := range tenants.Tenants {
		names = append(names, tn.Name)
	}
	if !slices.Equal(names, []string{"acme", "default", "other"}) {
		t.Errorf("tenants %v", names)
	}
	// The system admin has no role in its own tenant's jobs.
	if code := f.code(system, "JobService/PauseJob", `{"ref":{"namespace":"team-a","name":"a1"}}`); code != "permission_denied" {
		t.Errorf("a system admin without a tenant role pauses a job: %q", code)
	}
	for _, who := range []string{"admin", "other"} {
		for _, c := range []struct{ method, body string }{
			{"AccessService/CreateTenant", `{"name":"evil"}`},
			{"AccessService/ListTenants", `{}`},
			{"AccessService/CreateAPIKey", `{"tenant":"acme","principal":"x","role":"admin"}`},
			{"AccessService/CreateAPIKey", `{"principal":"x","role":"admin","system_admin":true}`},
		} {
			if code := f.code(f.keys[who], c.method, c.body); code != "permission_denied" {
				t.Errorf("%s: %s %s: %q, want permission_denied", who, c.method, c.body, code)
			}
		}
	}
}
