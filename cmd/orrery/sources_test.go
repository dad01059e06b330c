package main_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// A signed GitHub-style delivery, through real processes: an admin
// creates a source from the CLI naming a secret by reference, orrery
// serve resolves it under its --secret-env grant, and a push to main
// (signed with a real HMAC-SHA256) starts one run of the job whose
// schedule.event names github.push; a push to another branch starts none
// (the filter), a redelivery nothing more, and a forged one is 401.
func TestSignedDeliveryStartsARun(t *testing.T) {
	t.Parallel()
	const secret = "It's a Secret to Everybody"
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	key, _, code := run(t, "keys", "create", "--db", dsn, "--principal", "admin", "--role", "admin")
	if code != 0 {
		t.Fatal("keys create failed")
	}
	addr := freeAddr(t)
	p := startProcEnv(t, "serve", []string{"ORRERY_TEST_GH_SECRET=" + secret},
		"serve", "--db", dsn, "--addr", addr, "--auth", "keys", "--secret-env", "default/ci=ORRERY_TEST_GH_SECRET")
	workerProc(t, dsn, "w1")
	as := func(args ...string) (string, string, int) {
		t.Helper()
		return run(t, append([]string{"--server", addr, "--api-key", strings.TrimSpace(key)}, args...)...)
	}
	poll(t, 20*time.Second, "serve answers", func() bool { _, _, code := as("jobs", "list"); return code == 0 })
	out, errOut, code := as("sources", "create", "gh", "--kind", "github", "--namespace", "ci", "--secret", "secret://env/ORRERY_TEST_GH_SECRET")
	hook := regexp.MustCompile(`POST (\S+/api/v1/hooks/default:gh)\n`).FindStringSubmatch(out)
	if code != 0 || hook == nil {
		t.Fatalf("sources create: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := as("sources", "create", "gh", "--kind", "github", "--secret", "secret://env/X"); code == 0 || !strings.Contains(errOut, `source "gh"`) {
		t.Errorf("a taken name: exit %d %q", code, errOut)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "build.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: build, namespace: ci}
spec:
  schedule:
    event: {type: github.push, filter: '${{ event.data.ref == "refs/heads/main" }}'}
  steps:
    - name: build
      run: {command: {argv: ["/bin/echo", "${{ run.event.data.after }}"]}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := as("apply", "-f", dir); code != 0 {
		t.Fatalf("apply: exit %d %q %q", code, out, errOut)
	}
	deliver := func(id, body, sig string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, hook[1], strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", id)
		req.Header.Set("X-Hub-Signature-256", sig)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	sign := func(body string) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(body))
		return "sha256=" + hex.EncodeToString(m.Sum(nil))
	}
	main := `{"ref": "refs/heads/main", "after": "c0ffee"}`
	dev := `{"ref": "refs/heads/dev", "after": "dead"}`
	for _, c := range []struct {
		id, body, sig string
		status        int
	}{
		{"d-1", main, sign(main), http.StatusAccepted},
		{"d-1", main, sign(main), http.StatusOK}, // GitHub's redelivery
		{"d-2", dev, sign(dev), http.StatusAccepted},
		{"d-3", main, sign(dev), http.StatusUnauthorized},
	} {
		if status := deliver(c.id, c.body, c.sig); status != c.status {
			t.Errorf("delivery %s: %d, want %d\n%s", c.id, status, c.status, p.Logs())
		}
	}
	poll(t, 30*time.Second, "the push's run succeeds", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE trigger = 'event' AND status = 'succeeded'") == 1
	})
	poll(t, 10*time.Second, "every event taken", func() bool { return queryInt(t, pool, "SELECT count(*) FROM events WHERE pending") == 0 })
	if n := queryInt(t, pool, "SELECT count(*) FROM runs WHERE trigger = 'event'"); n != 1 {
		t.Errorf("%d event runs; want the push to main's only", n)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM events"); n != 2 {
		t.Errorf("%d events written; want 2 (the redelivery and the forgery write none)", n)
	}
	out, _, _ = as("runs", "list", "--trigger", "event")
	id := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`).FindString(out)
	if out, errOut, code := as("runs", "get", id); code != 0 || !strings.Contains(out, "started by event d-1 of type github.push") || !strings.Contains(out, "c0ffee") {
		t.Errorf("runs get: exit %d %q %q", code, out, errOut)
	}
}
