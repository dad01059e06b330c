package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// `orrery audit` prints the trail newest first as a table with the changed
// fields, filters by actor, action, target and time, stops at --limit, and
// fails on one line (exit 1) on bad flags and on the server's refusals.
func TestAuditVerb(t *testing.T) {
	addr, _ := startServe(t, pgtest.DSN(t))
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return run(t, append([]string{"--server", addr}, args...)...)
	}
	dir := t.TempDir()
	jobFile := filepath.Join(dir, "audited.yaml")
	write := func(cron string) {
		os.WriteFile(jobFile, []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: audited, namespace: team-a}\nspec:\n  schedule: {cron: \""+cron+"\"}\n  run: {handler: noop}\n"), 0o644)
	}
	write("30 2 * * *")
	if out, errOut, code := cli("apply", "-f", dir); code != 0 {
		t.Fatalf("apply: %s %s", out, errOut)
	}
	write("45 3 * * *")
	if out, errOut, code := cli("apply", "-f", dir); code != 0 {
		t.Fatalf("apply the new cron: %s %s", out, errOut)
	}
	if out, errOut, code := cli("jobs", "pause", "audited", "-n", "team-a"); code != 0 {
		t.Fatalf("pause: %s %s", out, errOut)
	}
	other := filepath.Join(t.TempDir(), "bystander.yaml")
	os.WriteFile(other, []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: bystander}\nspec:\n  schedule: {cron: \"@daily\"}\n  run: {handler: noop}\n"), 0o644)
	out, errOut, code := cli("jobs", "create", "-f", other)
	_, otherID, _ := strings.Cut(out, "(id ")
	otherID, _, _ = strings.Cut(otherID, ",")
	if code != 0 || len(otherID) != 36 {
		t.Fatalf("create: %s %s", out, errOut)
	}

	// rows runs `orrery audit args...` and returns its table's rows as
	// fields (AT, ACTOR, ACTION, then TARGET kind and name, then CHANGES).
	rows := func(args ...string) [][]string {
		t.Helper()
		out, errOut, code := cli(append([]string{"audit"}, args...)...)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != 0 || errOut != "" || len(lines) == 0 || strings.Join(strings.Fields(lines[0]), " ") != "AT (UTC) ACTOR ACTION TARGET CHANGES" {
			t.Fatalf("audit %v: exit %d\n%s%s", args, code, out, errOut)
		}
		var rs [][]string
		for _, l := range lines[1:] {
			rs = append(rs, strings.Fields(l))
		}
		return rs
	}
	summary := func(rs [][]string) string {
		var s []string
		for _, r := range rs {
			s = append(s, r[2]+" "+r[4])
		}
		return strings.Join(s, "; ")
	}

	all := rows()
	if got, want := summary(all), "create default/bystander; pause team-a/audited; update team-a/audited; create team-a/audited"; got != want {
		t.Fatalf("audit:\n%s\nwant %s", got, want)
	}
	for _, r := range all {
		if len(r) < 6 || !strings.HasSuffix(r[0], "Z") || r[1] != "anonymous" || r[3] != "job" {
			t.Errorf("row %q", r)
		}
	}
	update := strings.Join(all[2][5:], " ")
	if !strings.Contains(update, "spec.schedule.cron") || strings.Contains(update, "spec.steps") {
		t.Errorf("update's changes: %s", update)
	}
	if pause := strings.Join(all[1][5:], " "); !strings.Contains(pause, "status") || strings.Contains(pause, "spec.") {
		t.Errorf("pause's changes: %s", pause)
	}
	if all[0][5] != "-" || all[3][5] != "-" {
		t.Errorf("a create's changes: %q %q, want -", all[0], all[3])
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--action", "update"}, "update team-a/audited"},
		{[]string{"--action", "create"}, "create default/bystander; create team-a/audited"},
		{[]string{"--actor", "anonymous", "--limit", "2"}, "create default/bystander; pause team-a/audited"},
		{[]string{"--actor", "someone-else"}, ""},
		{[]string{"--target", "audited", "-n", "team-a"}, "pause team-a/audited; update team-a/audited; create team-a/audited"},
		{[]string{"--target", "team-a/audited", "--action", "pause"}, "pause team-a/audited"},
		{[]string{"--target", "bystander"}, "create default/bystander"},
		{[]string{"--target", otherID}, "create default/bystander"},
		{[]string{"--kind", "run"}, ""},
		{[]string{"--since", "2000-01-01T00:00:00Z", "--until", "2999-01-01T00:00:00+01:00", "--limit", "3"}, "create default/bystander; pause team-a/audited; update team-a/audited"},
		{[]string{"--since", "2999-01-01T00:00:00Z"}, ""},
		{[]string{"--limit", "1"}, "create default/bystander"},
	} {
		if got := summary(rows(tt.args...)); got != tt.want {
			t.Errorf("audit %v:\n%s\nwant %s", tt.args, got, tt.want)
		}
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "--since", "yesterday"}, `--since: "yesterday" is not an RFC 3339 instant`},
		{[]string{"audit", "--until", "0001-01-01T00:00:00Z"}, "--until: 0001-01-01T00:00:00Z is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59Z"},
		{[]string{"audit", "--since", "2026-01-02T00:00:00Z", "--until", "2026-01-01T00:00:00Z"}, "invalid_argument: until: must be after since"},
		{[]string{"audit", "--limit", "0"}, "--limit: 0 is not a positive number"},
		{[]string{"audit", "extra"}, "unknown command"},
	} {
		args := append([]string{"--server", addr}, tt.args...)
		out, errOut, code := run(t, args...)
		oneLineError(t, args, out, errOut, code, tt.want)
	}
	args := []string{"--server", freeAddr(t), "audit"}
	out, errOut, code = run(t, args...)
	oneLineError(t, args, out, errOut, code, "cannot reach the Orrery server")
}
