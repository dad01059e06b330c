package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/orrery-dev/orrery/api"
	_ "github.com/orrery-dev/orrery/api/gen/orrery/v1" // registers the services' descriptors
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

// authServer serves the API with API-key authentication (and a gateway
// for remote workers) and returns its base URL and keys: reader, editor
// and admin of tenant "default", a system admin of it with no role in it
// ("system"), an admin of tenant "other", and worker keys: "worker"
// (default, type echo in namespace team-a) and "other-worker" (other, any
// type).
func authServer(t *testing.T) (string, map[string]string) {
	t.Helper()
	base, keys, _ := authServerPool(t)
	return base, keys
}

// authServerPool is authServer with its database.
func authServerPool(t *testing.T) (string, map[string]string, *pgxpool.Pool) {
	t.Helper()
	return authServerWith(t, nil)
}

// authServerWith is authServerPool whose event sources' secrets resolve
// by secrets, and whose clients' addresses are known (failed deliveries
// are charged to them).
func authServerWith(t *testing.T, secrets *executor.SecretPolicy) (string, map[string]string, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	acc := access.New(pool)
	out := map[string]string{}
	for _, k := range []access.NewKey{
		{Tenant: "default", Principal: "reader", Role: access.Reader},
		{Tenant: "default", Principal: "editor", Role: access.Editor},
		{Tenant: "default", Principal: "admin", Role: access.Admin},
		{Tenant: "default", Principal: "system", Role: access.None, SystemAdmin: true},
		{Tenant: "other", Principal: "other", Role: access.Admin, CreateTenant: true},
		{Tenant: "default", Principal: "worker", Role: access.Worker, WorkerTypes: []string{"echo"}, WorkerNamespaces: []string{"team-a"}},
		{Tenant: "other", Principal: "other-worker", Role: access.Worker, WorkerTypes: []string{"*"}},
		{Tenant: "default", Principal: "publisher", Role: access.Publisher},
	} {
		k.CreatedBy = "test"
		secret, _, err := acc.Create(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		out[k.Principal] = secret
	}
	gw := enginetest.StartGateway(t, pool)
	var h http.Handler = api.NewHandler(api.Services{Jobs: jobs, Runs: run.NewService(pool, jobs, d), State: pool,
		Auth: api.KeyAuth{Access: acc}, Gateway: gw, Secrets: secrets}, nil)
	if secrets != nil {
		h = api.WithClientSource(h)
	}
	srv, err := api.Listen("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ctx) }()
	return "http://" + srv.Addr(), out, pool
}

// call posts a Connect JSON request and returns the HTTP status and the
// Connect error code ("" on success).
func call(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	status, code, _ := post(t, url, key, body)
	return status, code
}

// post posts a Connect JSON request (with key, if any) and returns the
// HTTP status, the Connect error code ("" on success) and the body.
func post(t *testing.T, url, key, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var e struct {
		Code string `json:"code"`
	}
	if res.StatusCode != http.StatusOK {
		_ = json.Unmarshal(b, &e)
	}
	return res.StatusCode, e.Code, string(b)
}

// Every RPC of every orrery.v1 service needs a key, and a role: the matrix
// of role x procedure is PermissionDenied exactly where the role is weaker
// than the procedure's. The list of procedures comes from the services'
// descriptors, so a new RPC is in the matrix without anyone adding it.
func TestEveryRPCNeedsAKeyAndItsRole(t *testing.T) {
	t.Parallel()
	base, keys := authServer(t)
	var procedures []string
	protoregistry.GlobalFiles.RangeFilesByPackage("orrery.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				procedures = append(procedures, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	if len(procedures) < 17 {
		t.Fatalf("found %d procedures: %v", len(procedures), procedures)
	}
	roles := map[string]access.Role{"reader": access.Reader, "editor": access.Editor, "admin": access.Admin}
	for _, p := range procedures {
		if _, code := call(t, base+p, "", "{}"); code != "unauthenticated" {
			t.Errorf("%s without a key: %q, want unauthenticated", p, code)
		}
		if _, code := call(t, base+p, "ork_"+strings.Repeat("A", 43), "{}"); code != "unauthenticated" {
			t.Errorf("%s with an unknown key: %q, want unauthenticated", p, code)
		}
		need, system := api.RequiredRole(p)
		for name, role := range roles {
			_, code := call(t, base+p, keys[name], "{}")
			if denied := code == "permission_denied"; denied != (system || (need != access.None && !role.Allows(need))) {
				t.Errorf("%s as %s: %q; it needs %s (system admin: %t)", p, name, code, need, system)
			}
		}
		// A worker key may use WorkerService (and ask who it is), nothing else.
		_, code := call(t, base+p, keys["worker"], "{}")
		workerCall := strings.HasPrefix(p, "/orrery.v1.WorkerService/") || need == access.None
		if denied := code == "permission_denied"; denied == workerCall {
			t.Errorf("%s as a worker key: %q", p, code)
		}
		// A publisher key may publish events (and ask who it is), nothing
		// else; so may an editor.
		_, code = call(t, base+p, keys["publisher"], "{}")
		publish := p == "/orrery.v1.EventService/Publish" || need == access.None
		if denied := code == "permission_denied"; denied == publish {
			t.Errorf("%s as a publisher key: %q", p, code)
		}
		// A system admin without a role in the tenant manages tenants and
		// nothing else that needs a tenant-wide role.
		_, code = call(t, base+p, keys["system"], "{}")
		switch allowed := code != "permission_denied"; {
		case system && !allowed:
			t.Errorf("%s as a system admin: %q", p, code)
		case !system && need != access.Reader && need != access.None && allowed:
			t.Errorf("%s as a system admin without a tenant role: %q; it needs %s", p, code, need)
		}
	}
	// Health and reflection stay open.
	if status, _ := call(t, base+"/grpc.health.v1.Health/Check", "", "{}"); status != http.StatusOK {
		t.Errorf("health without a key: %d", status)
	}
}

// A key acts in its own tenant only: another tenant's job is NotFound (as
// a job that does not exist, so existence does not leak) and never listed.
func TestKeysAreTenantScoped(t *testing.T) {
	t.Parallel()
	base, keys := authServer(t)
	job := `{"metadata":{"name":"mine","namespace":"team"},"spec":{"schedule":{"cron":"@daily"},"run":{"handler":"h"}}}`
	if status, code := call(t, base+"/orrery.v1.JobService/CreateJob", keys["editor"], job); status != http.StatusOK {
		t.Fatalf("create as editor: %d %s", status, code)
	}
	get := `{"ref":{"namespace":"team","name":"mine"}}`
	if _, code := call(t, base+"/orrery.v1.JobService/GetJob", keys["reader"], get); code != "" {
		t.Fatalf("get as reader of the same tenant: %s", code)
	}
	_, other := call(t, base+"/orrery.v1.JobService/GetJob", keys["other"], get)
	_, missing := call(t, base+"/orrery.v1.JobService/GetJob", keys["other"], `{"ref":{"namespace":"team","name":"nope"}}`)
	if other != "not_found" || missing != other {
		t.Fatalf("another tenant's job: %q, a missing job: %q; want both not_found", other, missing)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/orrery.v1.JobService/ListJobs", bytes.NewReader([]byte("{}")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+keys["other"])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if strings.Contains(string(b), "mine") {
		t.Fatalf("another tenant lists the job: %s", b)
	}
}

// Keys are stored as their SHA-256; expired and revoked ones are refused;
// a principal acts under its name and key prefix; creating and revoking
// keys is audited.
func TestRevokedAndExpiredKeysAreRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	keys := access.New(pool)
	keys.CacheTTL = 0 // every verification asks the database (the cache has its own test)
	secret, key, err := keys.Create(ctx, access.NewKey{Tenant: "default", Principal: "ci", Role: access.Editor, TTL: time.Hour, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := keys.Verify(ctx, secret)
	if err != nil || p.Name != "ci" || p.Role != access.Editor || p.KeyPrefix != key.Prefix || !strings.HasPrefix(secret, key.Prefix) {
		t.Fatalf("verify: %+v %v", p, err)
	}
	if p.Actor().Name != "ci ("+key.Prefix+")" {
		t.Fatalf("actor %q: want the principal and the key's prefix", p.Actor().Name)
	}
	if _, err := pool.Exec(ctx, "UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Verify(ctx, secret); err != access.ErrUnauthenticated {
		t.Fatalf("expired key: %v", err)
	}
	secret2, key2, err := keys.Create(ctx, access.NewKey{Tenant: "default", Principal: "ops", Role: access.Admin, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Revoke(ctx, p, key2.Prefix); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Verify(ctx, secret2); err != access.ErrUnauthenticated {
		t.Fatalf("revoked key: %v", err)
	}
	var stored int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM api_keys WHERE hash = sha256($1::bytea)", []byte(secret2)).Scan(&stored); err != nil || stored != 1 {
		t.Fatalf("the key is not stored as its SHA-256 (%d, %v)", stored, err)
	}
	var audited int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM audit_log WHERE action IN ('create_api_key', 'revoke_api_key')").Scan(&audited); err != nil || audited != 3 {
		t.Fatalf("%d audit rows for 2 creations and 1 revocation (%v)", audited, err)
	}
	if _, _, err := keys.Create(ctx, access.NewKey{Tenant: "nope", Principal: "x", Role: access.Reader, CreatedBy: "test"}); !errors.Is(err, access.ErrNotFound) {
		t.Fatal("a key for a tenant that does not exist was created")
	}
}

// A verified key is cached for CacheTTL: revoked through the same Keys it
// stops at once; revoked elsewhere (another node), within the TTL.
func TestKeyCacheForgetsRevokedKeys(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	here, there := access.New(pool), access.New(pool)
	here.CacheTTL = 300 * time.Millisecond
	admin := access.Principal{Tenant: job.DefaultTenant, Name: "admin", Role: access.Admin}
	secret, key, err := there.Create(ctx, access.NewKey{Tenant: "default", Principal: "ci", Role: access.Editor, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := here.Verify(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := there.Revoke(ctx, admin, key.Prefix); err != nil {
		t.Fatal(err)
	}
	if _, err := there.Verify(ctx, secret); err != access.ErrUnauthenticated {
		t.Fatalf("revoked through the same Keys: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := here.Verify(ctx, secret); err == access.ErrUnauthenticated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a key revoked on another node is still accepted after its cache TTL")
		}
		time.Sleep(50 * time.Millisecond)
	}
	secret2, key2, err := here.Create(ctx, access.NewKey{Tenant: "default", Principal: "ops", Role: access.Editor, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := here.Verify(ctx, secret2); err != nil {
		t.Fatal(err)
	}
	if err := here.Revoke(ctx, admin, key2.Prefix); err != nil {
		t.Fatal(err)
	}
	if _, err := here.Verify(ctx, secret2); err != access.ErrUnauthenticated {
		t.Fatalf("revoked through this Keys, still cached: %v", err)
	}
}

// callBody is call returning the error code and the body.
func callBody(t *testing.T, url, key, body string) (string, string) {
	t.Helper()
	_, code, b := post(t, url, key, body)
	return code, b
}

// An admin of another tenant reaches nothing of this tenant through any
// RPC that names a job, a run or a task, by name or by id: each is
// NotFound, as for an object that does not exist, lists show none of it,
// and nothing of this tenant changes.
func TestAnotherTenantReachesNothing(t *testing.T) {
	t.Parallel()
	base, keys := authServer(t)
	mine, other := keys["admin"], keys["other"]
	rpc := func(key, path, body string) (string, string) { t.Helper(); return callBody(t, base+path, key, body) }
	job := `{"metadata":{"name":"mine","namespace":"team"},"spec":{"schedule":{"cron":"@daily"},"run":{"handler":"h"}}}`
	code, body := rpc(mine, "/orrery.v1.JobService/CreateJob", job)
	if code != "" {
		t.Fatalf("create: %s %s", code, body)
	}
	var created struct {
		Job struct{ ID string } `json:"job"`
	}
	_ = json.Unmarshal([]byte(body), &created)
	code, body = rpc(mine, "/orrery.v1.RunService/TriggerJob", `{"job":{"namespace":"team","name":"mine"}}`)
	if code != "" {
		t.Fatalf("trigger: %s %s", code, body)
	}
	var triggered struct {
		Run struct{ ID string } `json:"run"`
	}
	_ = json.Unmarshal([]byte(body), &triggered)
	_, body = rpc(mine, "/orrery.v1.RunService/GetRun", `{"id":"`+triggered.Run.ID+`"}`)
	var got struct {
		Tasks []struct{ ID string } `json:"tasks"`
	}
	_ = json.Unmarshal([]byte(body), &got)
	if created.Job.ID == "" || triggered.Run.ID == "" || len(got.Tasks) != 1 {
		t.Fatalf("setup: job %q run %q tasks %v", created.Job.ID, triggered.Run.ID, got.Tasks)
	}
	byName := `{"namespace":"team","name":"mine"}`
	byID := `{"id":"` + created.Job.ID + `"}`
	for _, c := range []struct{ path, body string }{
		{"/orrery.v1.JobService/GetJob", `{"ref":` + byName + `}`},
		{"/orrery.v1.JobService/GetJob", `{"ref":` + byID + `}`},
		{"/orrery.v1.JobService/UpdateJob", `{"ref":` + byID + `,"metadata":{"name":"mine","namespace":"team"},"spec":{"schedule":{"cron":"@hourly"},"run":{"handler":"h"}},"expected_version":"1"}`},
		{"/orrery.v1.JobService/PauseJob", `{"ref":` + byName + `}`},
		{"/orrery.v1.JobService/ResumeJob", `{"ref":` + byID + `}`},
		{"/orrery.v1.JobService/DeleteJob", `{"ref":` + byID + `}`},
		{"/orrery.v1.JobService/Backfill", `{"ref":` + byID + `,"from":"2026-01-01T00:00:00Z","to":"2026-01-05T00:00:00Z"}`},
		{"/orrery.v1.JobService/ListBackfills", `{"ref":` + byName + `}`},
		{"/orrery.v1.JobService/CancelBackfill", `{"ref":` + byName + `,"id":"0190aaaa-0000-7000-8000-000000000000"}`},
		{"/orrery.v1.RunService/TriggerJob", `{"job":` + byID + `}`},
		{"/orrery.v1.RunService/GetRun", `{"id":"` + triggered.Run.ID + `"}`},
		{"/orrery.v1.RunService/CancelRun", `{"id":"` + triggered.Run.ID + `"}`},
		{"/orrery.v1.RunService/ListRuns", `{"job":` + byID + `}`},
		{"/orrery.v1.RunService/ListDeadLetters", `{"job":` + byName + `}`},
		{"/orrery.v1.AlertService/ListAlerts", `{"job":` + byID + `}`},
		{"/orrery.v1.AlertService/ListNotifications", `{"job":` + byName + `}`},
	} {
		if code, body := rpc(other, c.path, c.body); code != "not_found" {
			t.Errorf("%s %s as another tenant: %q %s; want not_found", c.path, c.body, code, body)
		}
	}
	for _, c := range []struct{ path, body string }{
		{"/orrery.v1.JobService/ListJobs", `{}`},
		{"/orrery.v1.RunService/ListRuns", `{}`},
		{"/orrery.v1.RunService/ListDeadLetters", `{}`},
		{"/orrery.v1.RunService/ReplayDeadLetters", `{"task_ids":["` + got.Tasks[0].ID + `"]}`},
		{"/orrery.v1.AuditService/ListAudit", `{}`},
		{"/orrery.v1.AlertService/ListAlerts", `{}`},
		{"/orrery.v1.AlertService/ListNotifications", `{}`},
		{"/orrery.v1.PipelineService/Plan", `{}`},
	} {
		code, body := rpc(other, c.path, c.body)
		if strings.Contains(body, created.Job.ID) || strings.Contains(body, triggered.Run.ID) || strings.Contains(body, got.Tasks[0].ID) || strings.Contains(body, `"mine"`) {
			t.Errorf("%s as another tenant shows this tenant's objects: %q %s", c.path, code, body)
		}
	}
	// Nothing of this tenant changed.
	code, body = rpc(mine, "/orrery.v1.JobService/GetJob", `{"ref":`+byID+`}`)
	if code != "" || !strings.Contains(body, `"status":"JOB_STATUS_ACTIVE"`) || !strings.Contains(body, `"@daily"`) || !strings.Contains(body, `"version":"1"`) {
		t.Errorf("this tenant's job after the other tenant's calls: %s %s", code, body)
	}
	if code, body := rpc(mine, "/orrery.v1.RunService/GetRun", `{"id":"`+triggered.Run.ID+`"}`); code != "" || strings.Contains(body, "cancelled") {
		t.Errorf("this tenant's run after the other tenant's calls: %s %s", code, body)
	}
}

// A call is authenticated before its body is read: without a key, a body
// that is not even JSON is Unauthenticated, not a decoding error. A source
// that keeps sending unknown keys is refused, 429 with Retry-After, before
// any lookup.
func TestRefusalsAreCheap(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	srv, err := api.Listen("127.0.0.1:0", api.WithClientSource(api.NewHandler(api.Services{Jobs: jobs, Runs: run.NewService(pool, jobs, d),
		State: pool, Auth: api.KeyAuth{Access: access.New(pool)}}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ctx) }()
	url := "http://" + srv.Addr() + "/orrery.v1.JobService/CreateJob"
	if status, code := call(t, url, "", "{not json"); status != http.StatusUnauthorized || code != "unauthenticated" {
		t.Errorf("a body that is not JSON, without a key: %d %q, want 401 unauthenticated", status, code)
	}
	var status int
	var code string
	for i := range access.FailuresPerSource + 1 {
		key := fmt.Sprintf("ork_%043d", i)
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		status = res.StatusCode
		var e struct{ Code string }
		_ = json.Unmarshal(b, &e)
		code = e.Code
		if i < access.FailuresPerSource && code != "unauthenticated" {
			t.Fatalf("unknown key %d: %d %s", i, status, b)
		}
		if i == access.FailuresPerSource && res.Header.Get("Retry-After") == "" {
			t.Errorf("the refusal has no Retry-After: %v", res.Header)
		}
	}
	if status != http.StatusTooManyRequests || code != "resource_exhausted" {
		t.Errorf("past the allowance: %d %q, want 429 resource_exhausted", status, code)
	}
	// Over REST too, from the same source: 429 with Retry-After.
	status, h, body := rest(t, "POST", "http://"+srv.Addr()+"/api/v1/jobs", fmt.Sprintf("ork_%043d", 999), "{}")
	if status != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(body, `"code":8`) {
		t.Errorf("over REST past the allowance: %d %v %s, want 429 with Retry-After", status, h, body)
	}
}
