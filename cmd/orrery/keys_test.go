package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// `orrery keys create --db` bootstraps an admin key; with it, `keys
// create` (no --db) makes keys over the API in the caller's tenant, `keys
// list` shows them by prefix and never their secrets, and `keys revoke`
// ends one at once. Errors are one line, exit 1.
func TestKeysVerbsOverTheAPI(t *testing.T) {
	dsn := pgtest.DSN(t)
	root, errOut, code := run(t, "keys", "create", "--db", dsn, "--principal", "root", "--role", "admin")
	root = strings.TrimSpace(root)
	if code != 0 || !strings.HasPrefix(root, "ork_") || !strings.Contains(errOut, "key "+root[:12]+" for root (admin) in tenant default") {
		t.Fatalf("keys create --db: exit %d %q %q", code, root, errOut)
	}
	addr, as := serveWithKeys(t, dsn, root)

	// Created over the API: the secret alone on stdout, the rest on stderr.
	ci, errOut, code := as(root, "keys", "create", "--principal", "ci", "--role", "editor", "--expires", "720h")
	ci = strings.TrimSpace(ci)
	if code != 0 || !strings.HasPrefix(ci, "ork_") || strings.Contains(ci, "\n") ||
		!strings.Contains(errOut, "key "+ci[:12]+" for ci (editor), expires ") || !strings.Contains(errOut, "shown once") {
		t.Fatalf("keys create: exit %d %q %q", code, ci, errOut)
	}
	if out, errOut, code := as(ci, "jobs", "list"); code != 0 {
		t.Fatalf("jobs list with the new key: %s %s", out, errOut)
	}
	// An editor cannot manage keys.
	args := []string{"--server", addr, "--api-key", ci, "keys", "list"}
	out, errOut, code := run(t, args...)
	oneLineError(t, args, out, errOut, code, "permission_denied")

	out, errOut, code = as(root, "keys", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || errOut != "" || len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "PREFIX PRINCIPAL ROLE CREATED (UTC) CREATED BY EXPIRES REVOKED" {
		t.Fatalf("keys list: exit %d\n%s%s", code, out, errOut)
	}
	rootRow, ciRow := strings.Fields(lines[1]), strings.Fields(lines[2])
	if rootRow[0] != root[:12] || rootRow[1] != "root" || rootRow[2] != "admin" || rootRow[len(rootRow)-2] != "-" || rootRow[len(rootRow)-1] != "-" ||
		ciRow[0] != ci[:12] || ciRow[1] != "ci" || ciRow[2] != "editor" || ciRow[4] != "root" || ciRow[5] != "("+root[:12]+")" ||
		!strings.HasSuffix(ciRow[6], "Z") || ciRow[7] != "-" {
		t.Fatalf("keys list:\n%s", out)
	}
	if strings.Contains(out, ci[12:]) || strings.Contains(out, root[12:]) {
		t.Fatalf("keys list shows a secret:\n%s", out)
	}

	if out, errOut, code := as(root, "keys", "revoke", ci[:12]); code != 0 || out != "revoked key "+ci[:12]+"\n" {
		t.Fatalf("keys revoke: exit %d %q %q", code, out, errOut)
	}
	args = []string{"--server", addr, "--api-key", ci, "jobs", "list"}
	out, errOut, code = run(t, args...)
	oneLineError(t, args, out, errOut, code, "unauthenticated")
	out, _, _ = as(root, "keys", "list")
	if row := strings.Fields(strings.Split(out, "\n")[2]); !strings.HasSuffix(row[len(row)-1], "Z") {
		t.Fatalf("keys list after the revocation:\n%s", out)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "revoke", ci[:12]}, "not_found"},
		{[]string{"keys", "revoke"}, "accepts 1 arg"},
		{[]string{"keys", "create", "--principal", "x", "--role", "owner"}, `--role "owner": want none, reader, editor, admin, worker or publisher`},
		{[]string{"keys", "create", "--principal", "x", "--role", "reader", "--expires", "-1h"}, "--expires -1h0m0s: must not be negative"},
		{[]string{"keys", "create", "--principal", "", "--role", "reader"}, "invalid_argument: principal: 1 to 200 characters"},
		{[]string{"keys", "create", "--principal", "x", "--role", "reader", "--tenant", "other"}, "permission_denied: root is not a system admin"},
		{[]string{"keys", "create", "--principal", "x", "--role", "reader", "--create-tenant"}, "--create-tenant needs --db"},
		{[]string{"tenants", "list"}, "permission_denied"},
	} {
		args := append([]string{"--server", addr, "--api-key", root}, tt.args...)
		out, errOut, code := run(t, args...)
		oneLineError(t, args, out, errOut, code, tt.want)
	}
}

// serveWithKeys starts `orrery serve --auth keys` on dsn, waits until key
// lists jobs, and returns its address and a way to run client commands
// with a key.
func serveWithKeys(t *testing.T, dsn, key string) (string, func(key string, args ...string) (string, string, int)) {
	t.Helper()
	addr := freeAddr(t)
	p := startProc(t, "serve", "serve", "--db", dsn, "--addr", addr, "--no-scheduler", "--auth", "keys")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, code := run(t, "--server", addr, "--api-key", key, "jobs", "list"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", p.Logs())
		}
	}
	return addr, func(key string, args ...string) (string, string, int) {
		t.Helper()
		return run(t, append([]string{"--server", addr, "--api-key", key}, args...)...)
	}
}

// A system admin key (made with --db) creates a tenant and its first
// admin key; that admin grants a principal editor on one namespace, and
// the principal's key (no tenant-wide role) applies jobs there and
// nowhere else. `grants list` and `tenants list` show what was done.
func TestTenantsAndGrantsVerbs(t *testing.T) {
	dsn := pgtest.DSN(t)
	sys, errOut, code := run(t, "keys", "create", "--db", dsn, "--principal", "ops", "--role", "none", "--system-admin")
	sys = strings.TrimSpace(sys)
	if code != 0 || !strings.Contains(errOut, "(none, system admin) in tenant default") {
		t.Fatalf("keys create --db --system-admin: exit %d %q %q", code, sys, errOut)
	}
	// A key with no role lists nothing; the server's readiness probe needs
	// one that does.
	reader, _, _ := run(t, "keys", "create", "--db", dsn, "--principal", "probe", "--role", "reader")
	addr, as := serveWithKeys(t, dsn, strings.TrimSpace(reader))

	if out, errOut, code := as(sys, "tenants", "create", "acme"); code != 0 || !strings.HasPrefix(out, "created tenant acme (") {
		t.Fatalf("tenants create: exit %d %q %q", code, out, errOut)
	}
	admin, errOut, code := as(sys, "keys", "create", "--tenant", "acme", "--principal", "acme-admin", "--role", "admin")
	admin = strings.TrimSpace(admin)
	if code != 0 || !strings.HasPrefix(admin, "ork_") {
		t.Fatalf("keys create --tenant acme: exit %d %q %q", code, admin, errOut)
	}
	if out, errOut, code := as(admin, "grants", "create", "dana", "editor", "-n", "payments"); code != 0 || out != "dana is editor on namespace payments\n" {
		t.Fatalf("grants create: exit %d %q %q", code, out, errOut)
	}
	dana, errOut, code := as(admin, "keys", "create", "--principal", "dana", "--role", "none")
	dana = strings.TrimSpace(dana)
	if code != 0 {
		t.Fatalf("keys create for dana: exit %d %q", code, errOut)
	}
	dir := t.TempDir()
	write := func(ns string) {
		os.WriteFile(filepath.Join(dir, "job.yaml"), []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: settle, namespace: "+ns+"}\nspec:\n  schedule: {cron: \"@daily\"}\n  run: {handler: h}\n"), 0o644)
	}
	write("payments")
	if out, errOut, code := as(dana, "apply", "-f", dir); code != 0 || !strings.Contains(out, "settle") {
		t.Fatalf("apply in payments as dana: exit %d %q %q", code, out, errOut)
	}
	write("billing")
	out, errOut, code := as(dana, "apply", "-f", dir)
	oneLineError(t, []string{"apply"}, out, errOut, code, "permission_denied: dana holds none on job billing/settle; this needs reader")

	out, errOut, code = as(admin, "grants", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || strings.Join(strings.Fields(lines[1])[:4], " ") != "payments * dana editor" {
		t.Fatalf("grants list: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := as(admin, "grants", "revoke", "dana", "-n", "payments"); code != 0 || out != "revoked dana's grant on namespace payments\n" {
		t.Fatalf("grants revoke: exit %d %q %q", code, out, errOut)
	}
	out, errOut, code = as(sys, "tenants", "list")
	if code != 0 || !strings.Contains(out, "acme") || !strings.Contains(out, "default") {
		t.Fatalf("tenants list: exit %d\n%s%s", code, out, errOut)
	}
	args := []string{"grants", "create", "dana", "editor"}
	out, errOut, code = as(admin, args...)
	oneLineError(t, args, out, errOut, code, `required flag(s) "namespace" not set`)

	// orrery login keeps the server and key; later commands need neither.
	configHome := t.TempDir()
	home := []string{"XDG_CONFIG_HOME=" + configHome}
	// A config file left readable by others is replaced by one only its
	// owner reads.
	config := filepath.Join(configHome, "orrery", "config.json")
	if err := os.MkdirAll(filepath.Dir(config), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runEnv(t, home, "--server", addr, "--api-key", admin, "login"); code != 0 ||
		!strings.HasPrefix(out, "logged in to http://"+addr+" as acme-admin in tenant acme, tenant-wide role admin") {
		t.Fatalf("login: exit %d %q %q", code, out, errOut)
	}
	if info, err := os.Stat(config); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("config after login: %v, %v; want mode 0600", info.Mode(), err)
	}
	if out, errOut, code := runEnv(t, home, "whoami"); code != 0 || out != "acme-admin in tenant acme, tenant-wide role admin\n" {
		t.Fatalf("whoami after login: exit %d %q %q", code, out, errOut)
	}
	if out, errOut, code := runEnv(t, home, "--api-key", dana, "whoami"); code != 0 || out != "dana in tenant acme, tenant-wide role none\n" {
		t.Fatalf("whoami with another key: exit %d %q %q", code, out, errOut)
	}
	if out, _, code := runEnv(t, home, "logout"); code != 0 || out != "logged out\n" {
		t.Fatalf("logout: %d %q", code, out)
	}
	args = []string{"--server", addr, "whoami"} // the key is forgotten
	out, errOut, code = runEnv(t, home, args...)
	oneLineError(t, args, out, errOut, code, "unauthenticated")
	args = []string{"--server", addr, "--api-key", "ork_" + strings.Repeat("x", 43), "login"}
	out, errOut, code = runEnv(t, home, args...)
	oneLineError(t, args, out, errOut, code, "unauthenticated")
}
