package main_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A tenant is held to its storage quotas through the API and the CLI: a
// job, a bigger definition or a triggered run over a quota is refused
// naming it, with nothing written; an instant its schedule fires over one
// is recorded as a skipped run; deleting a job gives its room back. A new
// tenant starts with the defaults, which its admin can read but not
// change; the default tenant has none.
func TestStorageQuotas(t *testing.T) {
	dsn, asDefault, asAcme, asSys := twoTenants(t)
	pool := openPool(t, dsn)
	ctx := context.Background()

	out, errOut, code := asAcme("tenants", "quota")
	if code != 0 || !regexpLine(out, `jobs\s+0\s+10000`) || !regexpLine(out, `tasks\s+0\s+10000000`) {
		t.Fatalf("acme's admin reads its own quotas: exit %d %q %q, want the defaults", code, out, errOut)
	}
	if _, errOut, code := asAcme("tenants", "quota", "default"); code == 0 || !strings.Contains(errOut, "permission_denied") {
		t.Errorf("acme's admin reads the default tenant's quotas: exit %d %q, want permission denied", code, errOut)
	}
	if _, errOut, code := asAcme("tenants", "set-quota", "acme", "--max-jobs", "100000"); code == 0 {
		t.Errorf("acme's admin raises its own quota: exit %d %q, want it refused", code, errOut)
	}
	if out, _, _ := asDefault("tenants", "quota"); !regexpLine(out, `jobs\s+0\s+none`) {
		t.Errorf("the default tenant's quotas: %q, want none", out)
	}
	if out, errOut, code := asSys("tenants", "set-quota", "acme", "--max-jobs", "2", "--max-definition-bytes", "3000",
		"--max-runs", "3", "--max-tasks", "5"); code != 0 || !regexpLine(out, `runs\s+0\s+3`) {
		t.Fatalf("set-quota: exit %d %q %q", code, out, errOut)
	}
	if out, errOut, code := asSys("tenants", "set-quota", "acme", "--max-items-per-step", "50000"); code != 0 || !strings.Contains(out, "items per fan-out 50000") {
		t.Errorf("set-quota --max-items-per-step: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := asSys("tenants", "set-quota", "acme", "--max-items-per-step", "100001"); code == 0 || !strings.Contains(errOut, "max_items_per_step: 100001: want 0 (the default, 10000) to 100000") {
		t.Errorf("set-quota --max-items-per-step past the cap: exit %d %q", code, errOut)
	}

	dir := t.TempDir()
	job := func(name, schedule, payload string) string {
		f := filepath.Join(dir, name+".yaml")
		os.WriteFile(f, []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: `+name+`, namespace: etl}
spec:
  schedule: {cron: "`+schedule+`"}
  steps:
    - {name: one, run: {command: {argv: [/bin/true]}}, payload: {pad: "`+payload+`"}}
    - {name: two, needs: [one], run: {command: {argv: [/bin/true]}}}
`), 0o644)
		return f
	}
	jobs := func() (n int) {
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM jobs j JOIN tenants te ON te.id = j.tenant_id
			WHERE te.name = 'acme' AND j.status <> 'deleted'`).Scan(&n)
		return n
	}
	for _, name := range []string{"a", "b"} {
		if out, errOut, code := asAcme("jobs", "create", "-f", job(name, "@yearly", "")); code != 0 {
			t.Fatalf("create %s: exit %d %q %q", name, code, out, errOut)
		}
	}
	_, errOut, code = asAcme("jobs", "create", "-f", job("c", "@yearly", ""))
	if code == 0 || !strings.Contains(errOut, "resource_exhausted") || !strings.Contains(errOut, "storage quota max_jobs is 2, it holds 2 and this would add 1") {
		t.Errorf("a third job: exit %d %q, want max_jobs named", code, errOut)
	}
	_, errOut, code = asAcme("apply", "-f", job("c", "@yearly", ""))
	if code == 0 || !strings.Contains(errOut, "max_jobs") {
		t.Errorf("a third job through apply: exit %d %q, want max_jobs named", code, errOut)
	}
	os.Remove(filepath.Join(dir, "c.yaml"))
	if n := jobs(); n != 2 {
		t.Errorf("acme has %d live jobs, want 2: nothing of a refused creation is written", n)
	}
	big := strings.Repeat("x", 3000)
	job("b", "@yearly", big)
	_, errOut, code = asAcme("apply", "-f", dir)
	if code == 0 || !strings.Contains(errOut, "storage quota max_definition_bytes is 3000") {
		t.Errorf("apply with a 3 KB payload: exit %d %q, want max_definition_bytes named", code, errOut)
	}
	var version int
	_ = pool.QueryRow(ctx, `SELECT version FROM jobs WHERE name = 'b' AND status <> 'deleted'`).Scan(&version)
	if version != 1 {
		t.Errorf("job b is at version %d after refused updates, want 1", version)
	}
	job("b", "@yearly", "") // as it is stored, for the apply below

	// Runs of two tasks each: two fit in 5 tasks, a third does not.
	for _, name := range []string{"a", "b"} {
		if out, errOut, code := asAcme("jobs", "trigger", name, "-n", "etl"); code != 0 {
			t.Fatalf("trigger %s: exit %d %q %q", name, code, out, errOut)
		}
	}
	_, errOut, code = asAcme("jobs", "trigger", "a", "-n", "etl", "--ignore-overlap")
	if code == 0 || !strings.Contains(errOut, "storage quota max_tasks is 5, it holds 4 and this would add 2") {
		t.Errorf("a third run: exit %d %q, want max_tasks named", code, errOut)
	}
	// The default tenant, without quotas, is not held by acme's.
	if out, errOut, code := asDefault("apply", "-f", dir); code != 0 {
		t.Fatalf("default tenant apply: %q %q", out, errOut)
	}
	if out, errOut, code := asDefault("jobs", "trigger", "a", "-n", "etl"); code != 0 {
		t.Fatalf("default tenant trigger: %q %q", out, errOut)
	}

	// Deleting a job frees its room; an instant fired over the task quota
	// is a skipped run whose reason names the quota.
	if out, errOut, code := asAcme("jobs", "delete", "b", "-n", "etl"); code != 0 {
		t.Fatalf("delete b: %q %q", out, errOut)
	}
	if out, errOut, code := asAcme("jobs", "create", "-f", job("tick", "@every 1s", "")); code != 0 {
		t.Fatalf("create tick after deleting b: exit %d %q %q", code, out, errOut)
	}
	var status, reason string
	poll(t, 30*time.Second, "tick's first instant is recorded", func() bool {
		err := pool.QueryRow(ctx, `SELECT r.status, r.reason FROM runs r JOIN jobs j ON j.id = r.job_id
			WHERE j.name = 'tick' ORDER BY r.scheduled_for LIMIT 1`).Scan(&status, &reason)
		return err == nil
	})
	if status != "skipped" || !strings.Contains(reason, "storage quota: tenant acme holds 4 of its max_tasks 5") {
		t.Errorf("tick's first run: %s %q, want skipped naming max_tasks", status, reason)
	}
	var tasks int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM tasks k JOIN runs r ON r.id = k.run_id JOIN jobs j ON j.id = r.job_id WHERE j.name = 'tick'`).Scan(&tasks)
	if tasks != 0 {
		t.Errorf("tick's skipped runs have %d tasks, want none", tasks)
	}
	out, _, _ = asAcme("tenants", "quota")
	if !regexpLine(out, `jobs\s+2\s+2`) || !regexpLine(out, `tasks\s+4\s+5`) {
		t.Errorf("acme's usage after all this: %q, want 2 jobs and 4 tasks", out)
	}

	// Counts written wrong (as by an older node) are counted again.
	if _, err := pool.Exec(ctx, "UPDATE tenant_run_usage SET tasks = tasks + 100; UPDATE tenant_job_usage SET jobs = jobs - 7"); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run(t, "migrate", "recount-usage", "--db", dsn); code != 0 {
		t.Fatalf("recount-usage: exit %d %q %q", code, out, errOut)
	}
	out, _, _ = asAcme("tenants", "quota")
	if !regexpLine(out, `jobs\s+2\s+2`) || !regexpLine(out, `tasks\s+4\s+5`) {
		t.Errorf("acme's usage after a recount: %q, want 2 jobs and 4 tasks", out)
	}
}

// regexpLine says whether some line of out matches the expression.
func regexpLine(out, expr string) bool {
	re := regexp.MustCompile(expr)
	for line := range strings.Lines(out) {
		if re.MatchString(line) {
			return true
		}
	}
	return false
}
