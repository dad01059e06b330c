package main_test

import (
	"encoding/json"
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

// Approvals through real processes, as a team uses them: a job applied
// from YAML asks for two approvals, separate from who triggered the run;
// its trigger principal is refused (the CLI names the field), a reader is
// refused over REST, an editor approves over REST (the step still waits,
// 1/2), an admin approves from the CLI and the step after runs with the
// decision. A second run is rejected from the CLI and fails, naming who
// and why; every decision is in the audit trail with its comment.
func TestApprovalOverRESTAndCLI(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	keys := map[string]string{}
	for _, k := range []struct{ principal, role string }{{"ann", "editor"}, {"bob", "editor"}, {"cat", "admin"}, {"rex", "reader"}} {
		out, errOut, code := run(t, "keys", "create", "--db", dsn, "--principal", k.principal, "--role", k.role)
		if code != 0 {
			t.Fatalf("keys create %s: %q", k.principal, errOut)
		}
		keys[k.principal] = strings.TrimSpace(out)
	}
	addr := freeAddr(t)
	p := startProc(t, "serve", "serve", "--db", dsn, "--addr", addr, "--auth", "keys")
	workerProc(t, dsn, "w1")
	as := func(who string, args ...string) (string, string, int) {
		t.Helper()
		return run(t, append([]string{"--server", addr, "--api-key", keys[who]}, args...)...)
	}
	poll(t, 20*time.Second, "serve answers", func() bool { _, _, code := as("cat", "jobs", "list"); return code == 0 })
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "refund.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: refund}
spec:
  schedule: {cron: "0 0 1 1 *"}
  params: {amount: {type: integer, default: 120}}
  steps:
    - name: refund-ok
      approval: {role: editor, count: 2, separate: true, timeout: 24h, message: "Refund ${{ params.amount }}?"}
    - name: pay
      needs: [refund-ok]
      run: {command: {argv: ["/bin/echo", "approved by ${{ steps[\"refund-ok\"].output.by }}"]}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := as("cat", "apply", "-f", dir); code != 0 {
		t.Fatalf("apply: exit %d %q %q", code, out, errOut)
	}
	uuidRE := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`)
	trigger := func() string {
		t.Helper()
		out, errOut, code := as("ann", "jobs", "trigger", "refund")
		if code != 0 {
			t.Fatalf("trigger: %q", errOut)
		}
		id := uuidRE.FindString(out)
		poll(t, 20*time.Second, "the approval parks", func() bool {
			return queryInt(t, pool, "SELECT count(*) FROM parked_steps WHERE kind = 'approval' AND run_id = '"+id+"'") == 1
		})
		return id
	}
	id := trigger()
	if out, errOut, code := as("rex", "runs", "get", id); code != 0 || !strings.Contains(out, "asks: Refund 120?") || !strings.Contains(out, "2 approval(s) from role editor, not ann") ||
		!strings.Contains(out, "parked: approval by editor 0/2") || !strings.Contains(out, "triggered by ann") {
		t.Errorf("runs get: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := as("ann", "runs", "approve", id, "refund-ok"); code == 0 || !strings.Contains(errOut, "approval.separate") {
		t.Errorf("ann approved her own run: exit %d %q", code, errOut)
	}
	decide := func(who, verb, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/runs/"+id+"/steps/refund-ok:"+verb, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keys[who])
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := decide("rex", "approve", `{}`); code != http.StatusForbidden || !strings.Contains(body, "approval.role") {
		t.Errorf("a reader approved over REST: %d %s", code, body)
	}
	code, body := decide("bob", "approve", `{"comment": "checked the order"}`)
	var got struct {
		Task struct{ Status, WaitReason string }
	}
	if _ = json.Unmarshal([]byte(body), &got); code != http.StatusOK || got.Task.Status != "running" || !strings.HasPrefix(got.Task.WaitReason, "approval by editor 1/2") {
		t.Errorf("bob's approval over REST: %d %s", code, body)
	}
	if code, body := decide("bob", "approve", `{}`); code != http.StatusConflict {
		t.Errorf("bob's second approval: %d %s", code, body)
	}
	if out, errOut, code := as("cat", "runs", "approve", id, "refund-ok", "--comment", "ok"); code != 0 || !strings.Contains(out, "step refund-ok of run "+id+" succeeded") {
		t.Errorf("cat's approval: exit %d %q %q\n%s", code, out, errOut, p.Logs())
	}
	poll(t, 30*time.Second, "the approved run succeeds", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE id = '"+id+"' AND status = 'succeeded'") == 1
	})
	if out, _, _ := as("cat", "runs", "get", id); !strings.Contains(out, "approved by cat") || !strings.Contains(out, `"decision":"approved"`) {
		t.Errorf("the run after its approval: %q", out)
	}

	id2 := trigger()
	if out, errOut, code := as("bob", "runs", "reject", id2, "refund-ok", "--comment", "not this month"); code != 0 || !strings.Contains(out, "dead_lettered") {
		t.Errorf("bob's rejection: exit %d %q %q", code, out, errOut)
	}
	poll(t, 30*time.Second, "the rejected run fails", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE id = '"+id2+"' AND status = 'failed'") == 1
	})
	if out, _, _ := as("cat", "runs", "get", id2); !strings.Contains(out, "rejected by bob: not this month") {
		t.Errorf("the rejected run: %q", out)
	}
	out, errOut, code := as("cat", "audit", "--target", id2)
	if code != 0 || !strings.Contains(out, "reject") || !strings.Contains(out, "not this month") {
		t.Errorf("audit list: exit %d %q %q", code, out, errOut)
	}
	if n := queryInt(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'reject' AND after->>'comment' = 'not this month'"); n != 1 {
		t.Errorf("the rejection is audited %d times with its comment", n)
	}
}
