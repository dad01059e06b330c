package main_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/internal/notify"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// A job with spec.alerts and spec.callbacks, served by `orrery serve` and
// an `orrery worker` process: a run whose webhook fails for good raises a
// failure and a dead_letter alert that `orrery alerts` lists, its alert
// receiver and its callback get signed posts, and `orrery alerts
// notifications` shows them delivered.
func TestAlertsAndCallbacksVerbs(t *testing.T) {
	dsn := pgtest.DSN(t)
	var mu sync.Mutex
	got := map[string][]*http.Request{}
	bodies := map[string][][]byte{}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got[r.URL.Path] = append(got[r.URL.Path], r)
		bodies[r.URL.Path] = append(bodies[r.URL.Path], b)
		if r.URL.Path == "/step" {
			w.WriteHeader(http.StatusBadRequest) // fails for good
		}
	}))
	defer sink.Close()
	count := func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(got[path])
	}

	addr := freeAddr(t)
	startProc(t, "serve", "serve", "--db", dsn, "--addr", addr, "--auth", "none")
	startProcEnv(t, "worker", []string{"HOOK_SECRET=whsec"}, "worker", "--db", dsn, "--queue", "default=2",
		"--allow-egress", "127.0.0.1/32", "--secret-env", "default/ops=HOOK_SECRET")
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return run(t, append([]string{"--server", addr}, args...)...)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, code := cli("jobs", "list"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("serve did not start")
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "job.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: export, namespace: ops}
spec:
  schedule: {cron: "@yearly"}
  run: {http: {url: "`+sink.URL+`/step"}}
  alerts:
    on: [failure, dead_letter]
    notify: [{webhook: {url: "`+sink.URL+`/alerts", secret: "secret://env/HOOK_SECRET"}}]
  callbacks:
    - webhook: {url: "`+sink.URL+`/finished", headers: {X-Token: "abc"}}
`), 0o644)
	if out, errOut, code := cli("apply", "-f", dir); code != 0 {
		t.Fatalf("apply: %s %s", out, errOut)
	}
	if out, errOut, code := cli("jobs", "trigger", "export", "-n", "ops"); code != 0 {
		t.Fatalf("trigger: %s %s", out, errOut)
	}
	var out string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, _, _ = cli("alerts", "--open")
		if strings.Contains(out, "failure") && strings.Contains(out, "dead_letter") && count("/alerts") == 2 && count("/finished") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alerts and notifications not within 30s: %d alert posts, %d callbacks\n%s", count("/alerts"), count("/finished"), out)
		}
	}
	t.Logf("orrery alerts --open:\n%s", out)
	if !strings.Contains(out, "ops/export") || !strings.Contains(out, "open") {
		t.Errorf("alerts table: %s", out)
	}
	mu.Lock()
	for i, alert := range got["/alerts"] {
		if err := notify.Verify([]byte("whsec"), alert.Header.Get("Orrery-Signature"), bodies["/alerts"][i], time.Now(), time.Minute); err != nil {
			t.Errorf("alert signature: %v", err)
		}
	}
	if cb := got["/finished"][0]; cb.Header.Get("X-Token") != "abc" || cb.Header.Get("Orrery-Event") != "run.failed" {
		t.Errorf("callback headers: %v", cb.Header)
	}
	mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, _, _ = cli("alerts", "notifications", "--job", "export", "-n", "ops", "--status", "delivered")
		if strings.Count(out, "delivered") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("notifications:\n%s", out)
		}
	}
	t.Logf("orrery alerts notifications:\n%s", out)
	if _, errOut, code := cli("alerts", "notifications", "--status", "lost"); code != 1 || !strings.Contains(errOut, "status") {
		t.Errorf("a bad --status: exit %d %s", code, errOut)
	}
	if _, errOut, code := cli("alerts", "--job", "nope", "-n", "ops"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("an unknown --job: exit %d %s", code, errOut)
	}
}
