package main_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// twoTenants starts `orrery serve --auth keys` (scheduler and watchdog
// included) on a fresh database with a second tenant, acme, beside the
// default one, and returns the database and a client for each tenant's
// admin and for a system admin. The caller starts the workers it needs.
func twoTenants(t *testing.T) (dsn string, asDefault, asAcme, asSys func(args ...string) (string, string, int)) {
	t.Helper()
	dsn = pgtest.DSN(t)
	sys, _, code := run(t, "keys", "create", "--db", dsn, "--principal", "ops", "--role", "none", "--system-admin")
	if code != 0 {
		t.Fatal("keys create --system-admin failed")
	}
	admin, _, code := run(t, "keys", "create", "--db", dsn, "--principal", "default-admin", "--role", "admin")
	if code != 0 {
		t.Fatal("keys create for the default tenant failed")
	}
	addr := freeAddr(t)
	p := startProc(t, "serve", "serve", "--db", dsn, "--addr", addr, "--auth", "keys")
	as := func(key string) func(args ...string) (string, string, int) {
		return func(args ...string) (string, string, int) {
			t.Helper()
			return run(t, append([]string{"--server", addr, "--api-key", strings.TrimSpace(key)}, args...)...)
		}
	}
	asDefault = as(admin)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, code := asDefault("jobs", "list"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", p.Logs())
		}
	}
	if out, errOut, code := as(sys)("tenants", "create", "acme"); code != 0 {
		t.Fatalf("tenants create: exit %d %q %q", code, out, errOut)
	}
	acme, errOut, code := as(sys)("keys", "create", "--tenant", "acme", "--principal", "acme-admin", "--role", "admin")
	if code != 0 {
		t.Fatalf("keys create --tenant acme: exit %d %q", code, errOut)
	}
	return dsn, asDefault, as(acme), as(sys)
}

// A secret granted to the default tenant's namespace analytics
// (--secret-env default/analytics=HOOK_TOKEN) reaches that namespace's
// command env, webhook header and alert notification, and none of them in
// another tenant's namespace of the same name, whose editor wrote the
// same job: there each reference is refused, naming acme/analytics, and
// nothing carrying the value is sent.
func TestSecretsBelongToTenants(t *testing.T) {
	const token = "Bearer default-tenant-secret"
	var mu sync.Mutex
	got := map[string][]string{} // path -> Authorization headers
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		got[r.URL.Path] = append(got[r.URL.Path], r.Header.Get("Authorization"))
	}))
	defer sink.Close()

	dsn, asDefault, asAcme, _ := twoTenants(t)
	startProcEnv(t, "worker", []string{"HOOK_TOKEN=" + token}, "worker", "--db", dsn, "--queue", "default=2",
		"--allow-command", "/bin/*", "--allow-egress", "127.0.0.1/32", "--secret-env", "default/analytics=HOOK_TOKEN")

	for tenant, as := range map[string]func(...string) (string, string, int){"default": asDefault, "acme": asAcme} {
		dir := t.TempDir()
		url := sink.URL + "/" + tenant
		os.WriteFile(filepath.Join(dir, "job.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: reader, namespace: analytics}
spec:
  schedule: {cron: "@yearly"}
  defaults: {retry: {max_attempts: 1}}
  steps:
    - name: env
      run: {command: {argv: [/bin/sh, -c, 'echo token=$TOKEN'], env: {TOKEN: "secret://env/HOOK_TOKEN"}}}
    - name: hook
      run: {http: {url: "`+url+`/step", headers: {Authorization: "secret://env/HOOK_TOKEN"}}}
    - name: fail
      run: {command: {argv: [/bin/false]}}
  alerts:
    on: [failure]
    notify: [{webhook: {url: "`+url+`/alert", headers: {Authorization: "secret://env/HOOK_TOKEN"}}}]
`), 0o644)
		if out, errOut, code := as("apply", "-f", dir); code != 0 {
			t.Fatalf("%s: apply: %s %s", tenant, out, errOut)
		}
		if out, errOut, code := as("jobs", "trigger", "reader", "-n", "analytics"); code != 0 {
			t.Fatalf("%s: trigger: %s %s", tenant, out, errOut)
		}
	}

	pool := openPool(t, dsn)
	notification := func(tenant string) (status, lastError string) {
		_ = pool.QueryRow(context.Background(), `SELECT n.status, n.last_error FROM notifications n JOIN tenants te ON te.id = n.tenant_id
			WHERE te.name = $1 AND n.event = 'alert.raised'`, tenant).Scan(&status, &lastError)
		return status, lastError
	}
	poll(t, 60*time.Second, "both tenants' alert notifications end", func() bool {
		d, _ := notification("default")
		a, _ := notification("acme")
		return d == "delivered" && a == "failed"
	})

	attempt := func(tenant, step string) (outcome, output, errText string) {
		t.Helper()
		err := pool.QueryRow(context.Background(), `SELECT a.outcome, a.output, a.error FROM attempts a JOIN tasks k ON k.id = a.task_id
			JOIN tenants te ON te.id = k.tenant_id WHERE te.name = $1 AND k.step = $2`, tenant, step).Scan(&outcome, &output, &errText)
		if err != nil {
			t.Fatalf("%s's attempt of %s: %v", tenant, step, err)
		}
		return outcome, output, errText
	}
	if outcome, output, _ := attempt("default", "env"); outcome != "succeeded" || !strings.Contains(output, "token="+token) {
		t.Errorf("default/analytics env step: %s %q, want the secret in its env", outcome, output)
	}
	const refused = `namespace "acme/analytics" may not read this environment variable on this worker (--secret-env)`
	for _, step := range []string{"env", "hook"} {
		outcome, output, errText := attempt("acme", step)
		if outcome != "failed" || !strings.Contains(errText, refused) || strings.Contains(output+errText, "default-tenant-secret") {
			t.Errorf("acme/analytics %s step: %s %q %q, want it refused without the value", step, outcome, output, errText)
		}
	}
	if _, lastError := notification("acme"); !strings.Contains(lastError, refused) {
		t.Errorf("acme's alert notification: %q, want the refusal", lastError)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, path := range []string{"/default/step", "/default/alert"} {
		if h := got[path]; len(h) != 1 || h[0] != token {
			t.Errorf("%s got %q, want the secret once", path, h)
		}
	}
	for path, h := range got {
		if strings.HasPrefix(path, "/acme/") {
			t.Errorf("%s was called (%q): the other tenant's references must send nothing", path, h)
		}
	}
}

// A worker bound to a tenant (--tenant acme) runs that tenant's steps
// only, and the shared worker of the same queue none of them: acme's tasks
// go to acme's own queue, default|acme, from the moment the bound worker
// starts. The cluster view shows each tenant its own and the shared
// workers. Unbinding sends acme's new tasks to the shared pool again.
func TestWorkersBoundToTenants(t *testing.T) {
	dsn, asDefault, asAcme, _ := twoTenants(t)
	pool := openPool(t, dsn)
	out, errOut, code := run(t, "worker", "--db", dsn, "--queue", "default=1", "--tenant", "nope")
	oneLineError(t, []string{"worker", "--tenant", "nope"}, out, errOut, code, `tenant "nope": no such tenant`)

	out, errOut, code = run(t, "worker", "--db", dsn, "--queue", "default=1", "--capacity", "cpu=4,memory=lots")
	oneLineError(t, []string{"worker", "--capacity"}, out, errOut, code, `--capacity: memory: "lots" is not a quantity such as 512Mi or 4Gi`)
	startProc(t, "shared", "worker", "--db", dsn, "--queue", "default=2", "--name", "shared", "--allow-command", "/bin/*",
		"--capacity", "cpu=4,memory=8Gi,licence=2")
	startProc(t, "acme-pool", "worker", "--db", dsn, "--queue", "default=2", "--name", "acme-pool", "--tenant", "acme", "--allow-command", "/bin/*")
	poll(t, 20*time.Second, "acme's queue default bound", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM queue_bindings WHERE bound_queue = 'default|acme'`) == 1
	})

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "job.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: work, namespace: team}
spec:
  schedule: {cron: "@yearly"}
  overlap: allow
  steps:
    - {name: a, run: {command: {argv: [/bin/true]}}}
    - {name: b, needs: [a], run: {command: {argv: [/bin/true]}}}
`), 0o644)
	trigger := func(as func(...string) (string, string, int), times int) {
		t.Helper()
		for range times {
			if out, errOut, code := as("jobs", "trigger", "work", "-n", "team"); code != 0 {
				t.Fatalf("trigger: %s %s", out, errOut)
			}
		}
	}
	for _, as := range []func(...string) (string, string, int){asDefault, asAcme} {
		if out, errOut, code := as("apply", "-f", dir); code != 0 {
			t.Fatalf("apply: %s %s", out, errOut)
		}
		trigger(as, 3)
	}
	succeeded := func(tenant string) int {
		return queryInt(t, pool, `SELECT count(*) FROM runs r JOIN tenants te ON te.id = r.tenant_id WHERE te.name = $1 AND r.status = 'succeeded'`, tenant)
	}
	t.Cleanup(func() {
		if t.Failed() {
			rows, _ := pool.Query(context.Background(), `SELECT te.name || ' ' || k.step || ' ' || k.status || ' ' || k.queue || ' ' || coalesce(k.admitted_at::text, '-') FROM tasks k JOIN tenants te ON te.id = k.tenant_id`)
			for rows.Next() {
				var s string
				rows.Scan(&s)
				t.Log(s)
			}
			rows.Close()
		}
	})
	poll(t, 60*time.Second, "every run succeeds", func() bool { return succeeded("default") == 3 && succeeded("acme") == 3 })
	// where lists "queue worker" of a tenant's attempts.
	where := func(tenant string) map[string]int {
		rows, err := pool.Query(context.Background(), `SELECT k.queue || ' ' || a.worker FROM attempts a JOIN tasks k ON k.id = a.task_id
			JOIN tenants te ON te.id = k.tenant_id WHERE te.name = $1`, tenant)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out[s]++
		}
		return out
	}
	if got := where("acme"); len(got) != 1 || got["default|acme acme-pool"] != 6 {
		t.Errorf("acme's attempts by queue and worker: %v, want all 6 in default|acme on acme-pool", got)
	}
	if got := where("default"); len(got) != 1 || got["default shared"] != 6 {
		t.Errorf("the default tenant's attempts by queue and worker: %v, want all 6 in default on shared", got)
	}

	// The cluster view: acme sees the shared worker and its own; the
	// default tenant's admin (no system admin) the shared one only.
	for tenant, as := range map[string]func(...string) (string, string, int){"acme": asAcme, "default": asDefault} {
		out, errOut, code := as("cluster")
		if code != 0 {
			t.Fatalf("%s: cluster: %s %s", tenant, out, errOut)
		}
		if !regexp.MustCompile(`(?m)^shared\s+true\s+shared\s+default=2\s+-\s+\d+\s+cpu 0/4, memory 0/8Gi, licence 0/2\s`).MatchString(out) {
			t.Errorf("%s's cluster view lacks the shared worker and its capacity:\n%s", tenant, out)
		}
		if tenant == "acme" && !regexp.MustCompile(`(?m)^acme-pool\s.*\scpu 0/[1-9][0-9]*, memory 0/\S+\s`).MatchString(out) {
			t.Errorf("acme-pool's capacity is not its machine's:\n%s", out)
		}
		if got, want := regexp.MustCompile(`(?m)^acme-pool\s+true\s+acme\s+default\|acme=2\s+-\s`).MatchString(out), tenant == "acme"; got != want {
			t.Errorf("%s's cluster view shows acme-pool: %v, want %v:\n%s", tenant, got, want, out)
		}
	}

	out, errOut, code = run(t, "queues", "bindings", "--db", dsn)
	if code != 0 || !regexp.MustCompile(`(?m)^acme\s+default\s+default\|acme\s+acme-pool\s`).MatchString(out) {
		t.Fatalf("queues bindings: exit %d %s %s", code, out, errOut)
	}
	if out, errOut, code := run(t, "queues", "unbind", "acme", "default", "--db", dsn); code != 0 || out != "unbound queue default of tenant acme\n" {
		t.Fatalf("queues unbind: exit %d %q %q", code, out, errOut)
	}
	out, errOut, code = run(t, "queues", "unbind", "acme", "default", "--db", dsn)
	oneLineError(t, []string{"queues", "unbind"}, out, errOut, code, `queue "default" of tenant "acme": the queue is not bound to the tenant`)
	trigger(asAcme, 1)
	poll(t, 60*time.Second, "acme's run after the unbinding succeeds", func() bool { return succeeded("acme") == 4 })
	if got := where("acme"); got["default shared"] != 2 {
		t.Errorf("acme's attempts after the unbinding: %v, want its 2 new ones in default on shared", got)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM audit_log a JOIN tenants te ON te.id = a.tenant_id WHERE te.name = 'acme' AND a.action IN ('bind_queue', 'unbind_queue')`); n != 2 {
		t.Errorf("acme's audit trail holds %d bind and unbind rows, want 2", n)
	}
}
