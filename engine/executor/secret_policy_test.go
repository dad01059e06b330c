package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/dag"
)

// secretLayout builds, under a fresh folder base:
//
//	base/secrets/analytics/token          "tok-analytics"
//	base/secrets/analytics/sub/deep       "deep-value"
//	base/secrets/analytics/link-in        -> token
//	base/secrets/analytics/abs-in         -> base/secrets/analytics/token
//	base/secrets/analytics/link-out       -> ../../outside
//	base/secrets/analytics/abs-out        -> base/outside
//	base/secrets/analytics/dir-out        -> ../../elsewhere
//	base/secrets/analytics-other/key      "other-value" (a name that extends the folder's)
//	base/secrets/shared/common            "common-value"
//	base/outside                          "outside-value"
//	base/elsewhere/file                   "elsewhere-value"
//	base/alias                            -> secrets/analytics
func secretLayout(t *testing.T) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"secrets/analytics/token":     "tok-analytics\n",
		"secrets/analytics/sub/deep":  "deep-value",
		"secrets/analytics-other/key": "other-value",
		"secrets/shared/common":       "common-value",
		"outside":                     "outside-value",
		"elsewhere/file":              "elsewhere-value",
	} {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"secrets/analytics/link-in":  "token",
		"secrets/analytics/abs-in":   filepath.Join(base, "secrets/analytics/token"),
		"secrets/analytics/link-out": "../../outside",
		"secrets/analytics/abs-out":  filepath.Join(base, "outside"),
		"secrets/analytics/dir-out":  "../../elsewhere",
		"alias":                      "secrets/analytics",
	} {
		if err := os.Symlink(target, filepath.Join(base, link)); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

// No t.Parallel: t.Setenv.
func TestSecretPolicy(t *testing.T) {
	base := secretLayout(t)
	t.Setenv("ORRERY_TEST_POLICY_TOKEN", "env-token")
	t.Setenv("ORRERY_TEST_POLICY_GLOB_A", "env-glob")
	t.Setenv("ORRERY_TEST_POLICY_SHARED", "env-shared")
	t.Setenv("ORRERY_TEST_POLICY_OTHER", "env-other")
	t.Setenv("ORRERY_TEST_POLICY_UNSET", "")
	os.Unsetenv("ORRERY_TEST_POLICY_UNSET")

	policy := &SecretPolicy{
		Env: map[string][]string{
			"acme/analytics": {"ORRERY_TEST_POLICY_TOKEN", "ORRERY_TEST_POLICY_GLOB_*", "ORRERY_TEST_POLICY_UNSET"},
			"acme/*":         {"ORRERY_TEST_POLICY_SHARED"},
			"globex/billing": {"ORRERY_TEST_POLICY_OTHER"},
		},
		Dirs: map[string][]string{
			"acme/analytics": {filepath.Join(base, "secrets/analytics")},
			"acme/etl":       {filepath.Join(base, "alias")},
			"acme/*":         {filepath.Join(base, "secrets/shared")},
			"globex/billing": {filepath.Join(base, "elsewhere")},
		},
	}
	file := func(rel string) string { return "secret://file" + base + "/" + rel }
	const (
		envRefused  = "may not read this environment variable on this worker (--secret-env)"
		fileRefused = "may not read this file on this worker: it is outside the folders allowed (--secret-dir)"
		escapes     = "may not read this file on this worker: it resolves outside the folders allowed (--secret-dir)"
		unreadable  = "cannot read the file on this worker"
	)
	tests := []struct {
		name      string
		tenant    string // default acme
		namespace string
		ref       string
		want      string
		wantErr   string // substring; "" means the value resolves
		retryable bool   // for an error: missing rather than refused
	}{
		{name: "env allowed", namespace: "analytics", ref: "secret://env/ORRERY_TEST_POLICY_TOKEN", want: "env-token"},
		{name: "env allowed by a pattern", namespace: "analytics", ref: "secret://env/ORRERY_TEST_POLICY_GLOB_A", want: "env-glob"},
		{name: "env allowed for every namespace", namespace: "etl", ref: "secret://env/ORRERY_TEST_POLICY_SHARED", want: "env-shared"},
		{name: "env of another namespace", namespace: "etl", ref: "secret://env/ORRERY_TEST_POLICY_TOKEN", wantErr: envRefused},
		{name: "env not listed", namespace: "analytics", ref: "secret://env/ORRERY_TEST_POLICY_OTHER", wantErr: envRefused},
		{name: "worker variable not listed", namespace: "analytics", ref: "secret://env/PATH", wantErr: envRefused},
		{name: "env allowed but unset", namespace: "analytics", ref: "secret://env/ORRERY_TEST_POLICY_UNSET", wantErr: "is not set on this worker", retryable: true},

		{name: "file allowed", namespace: "analytics", ref: file("secrets/analytics/token"), want: "tok-analytics"},
		{name: "file in a subfolder", namespace: "analytics", ref: file("secrets/analytics/sub/deep"), want: "deep-value"},
		{name: "dot-dot that stays inside", namespace: "analytics", ref: file("secrets/analytics/sub/../token"), want: "tok-analytics"},
		{name: "relative symlink inside", namespace: "analytics", ref: file("secrets/analytics/link-in"), want: "tok-analytics"},
		{name: "absolute symlink inside", namespace: "analytics", ref: file("secrets/analytics/abs-in"), want: "tok-analytics"},
		{name: "file for every namespace", namespace: "billing", ref: file("secrets/shared/common"), want: "common-value"},
		{name: "through a symlinked allowed folder", namespace: "etl", ref: file("alias/token"), want: "tok-analytics"},
		{name: "real path of a symlinked allowed folder", namespace: "etl", ref: file("secrets/analytics/sub/deep"), want: "deep-value"},

		{name: "dot-dot out of the folder", namespace: "analytics", ref: file("secrets/analytics/../../outside"), wantErr: fileRefused},
		{name: "dot-dot to a sibling folder", namespace: "analytics", ref: file("secrets/analytics/../shared/../analytics-other/key"), wantErr: fileRefused},
		{name: "folder name prefix is not the folder", namespace: "analytics", ref: file("secrets/analytics-other/key"), wantErr: fileRefused},
		{name: "relative symlink out", namespace: "analytics", ref: file("secrets/analytics/link-out"), wantErr: escapes},
		{name: "absolute symlink out", namespace: "analytics", ref: file("secrets/analytics/abs-out"), wantErr: escapes},
		{name: "symlinked folder out", namespace: "analytics", ref: file("secrets/analytics/dir-out/file"), wantErr: escapes},
		{name: "another namespace's folder", namespace: "billing", ref: file("secrets/analytics/token"), wantErr: fileRefused},
		{name: "outside every folder", namespace: "analytics", ref: "secret://file/etc/hostname", wantErr: fileRefused},
		{name: "the folder itself", namespace: "analytics", ref: file("secrets/analytics"), wantErr: unreadable, retryable: true},
		{name: "missing file in an allowed folder", namespace: "analytics", ref: file("secrets/analytics/missing"), wantErr: unreadable, retryable: true},

		{name: "unknown kind", namespace: "analytics", ref: "secret://vault/x", wantErr: "use secret://env/NAME or secret://file/PATH"},

		{name: "env of another tenant's namespace of the same name", tenant: "globex", namespace: "analytics", ref: "secret://env/ORRERY_TEST_POLICY_TOKEN", wantErr: envRefused},
		{name: "env of another tenant's every namespace", tenant: "globex", namespace: "etl", ref: "secret://env/ORRERY_TEST_POLICY_SHARED", wantErr: envRefused},
		{name: "env of the other tenant's own grant", tenant: "globex", namespace: "billing", ref: "secret://env/ORRERY_TEST_POLICY_OTHER", want: "env-other"},
		{name: "env the other tenant's grant names, in the first tenant", namespace: "billing", ref: "secret://env/ORRERY_TEST_POLICY_OTHER", wantErr: envRefused},
		{name: "file of another tenant's namespace of the same name", tenant: "globex", namespace: "analytics", ref: file("secrets/analytics/token"), wantErr: fileRefused},
		{name: "file of another tenant's every namespace", tenant: "globex", namespace: "billing", ref: file("secrets/shared/common"), wantErr: fileRefused},
		{name: "a call without a tenant", tenant: "-", namespace: "analytics", ref: "secret://env/ORRERY_TEST_POLICY_TOKEN", wantErr: envRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tenant := tt.tenant
			switch tenant {
			case "":
				tenant = "acme"
			case "-":
				tenant = ""
			}
			got, err := policy.resolve(tenant, tt.namespace, tt.ref)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("resolve(%q, %q, %q) = %q, %v; want %q", tenant, tt.namespace, tt.ref, got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("resolve(%q, %q, %q) = %q, want an error containing %q", tenant, tt.namespace, tt.ref, got, tt.wantErr)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.wantErr) || !strings.HasPrefix(msg, "secret "+tt.ref+": ") {
				t.Errorf("error = %q, want it to name the reference and contain %q", msg, tt.wantErr)
			}
			if strings.Contains(msg, "-value") || strings.Contains(msg, "tok-") || strings.Contains(msg, "env-") || strings.Contains(msg, base+"/outside") {
				t.Errorf("error %q carries a value or a path beyond the reference", msg)
			}
			if got != "" {
				t.Errorf("resolve returned %q with an error", got)
			}
			res := err.result()
			if res.Retryable != tt.retryable || (res.FailureClass == ClassUser) == tt.retryable {
				t.Errorf("result = %+v, want retryable %v (a refusal is the user's, for good)", res, tt.retryable)
			}
		})
	}
}

// With no policy, or an empty one, nothing resolves (but plain values
// pass through).
func TestSecretPolicyDefaultsToNothing(t *testing.T) {
	t.Parallel()
	base := secretLayout(t)
	for name, p := range map[string]*SecretPolicy{"nil": nil, "zero": {}} {
		for _, ref := range []string{"secret://env/PATH", "secret://env/HOME", "secret://file" + base + "/secrets/shared/common", "secret://file/etc/hostname"} {
			if got, err := p.resolve("default", "default", ref); err == nil || !err.refused {
				t.Errorf("%s policy: resolve(%q) = %q, %v; want a refusal", name, ref, got, err)
			}
		}
		if got, err := p.resolve("default", "default", "Bearer plain"); err != nil || got != "Bearer plain" {
			t.Errorf("%s policy: a plain value = %q, %v", name, got, err)
		}
	}
}

// A webhook whose header names a refused secret is not called, and fails
// for good naming the reference.
func TestHTTPRefusedSecretSendsNothing(t *testing.T) {
	t.Setenv("ORRERY_TEST_REFUSED_TOKEN", "Bearer must-not-leak")
	srv, reqs := newServer(t, 200, "")
	secrets := &SecretPolicy{Env: map[string][]string{"acme/analytics": {"ORRERY_TEST_REFUSED_TOKEN"}}} // the call is in acme/etl
	res := (&Runner{HTTP: &HTTPRunner{Client: srv.Client(), Secrets: secrets}}).Run(context.Background(),
		httpCall(srv.URL, "POST", map[string]string{"Authorization": "secret://env/ORRERY_TEST_REFUSED_TOKEN"}))
	if !strings.Contains(res.Error, "secret://env/ORRERY_TEST_REFUSED_TOKEN") || !strings.Contains(res.Error, `namespace "acme/etl"`) ||
		strings.Contains(res.Error, "must-not-leak") {
		t.Errorf("Error = %q, want it to name the reference and the namespace, not the value", res.Error)
	}
	res.Error = ""
	if want := (Result{ExitReason: ReasonError, FailureClass: ClassUser}); res != want {
		t.Errorf("Run() = %+v\nwant    %+v", res, want)
	}
	select {
	case r := <-reqs:
		t.Errorf("a request was sent despite the refused secret: %+v", r)
	default:
	}
}

// A command whose env names a file secret outside its folders does not
// run.
func TestCommandRefusedFileSecretDoesNotRun(t *testing.T) {
	t.Parallel()
	base := secretLayout(t)
	marker := filepath.Join(t.TempDir(), "ran")
	secrets := &SecretPolicy{Dirs: map[string][]string{"acme/etl": {filepath.Join(base, "secrets/analytics")}}}
	for _, ref := range []string{"secrets/analytics/../../outside", "secrets/analytics/link-out"} {
		c := testCall(dag.Executor{Command: &dag.CommandExecutor{
			Argv: []string{"/bin/sh", "-c", `touch "$0"`, marker},
			Env:  map[string]string{"KEY": "secret://file" + base + "/" + ref},
		}})
		res := (&Runner{Command: &CommandRunner{Allow: []string{"/bin/*"}, Secrets: secrets}}).Run(context.Background(), c)
		if res.OK || res.Retryable || res.FailureClass != ClassUser || strings.Contains(res.Error, "outside-value") {
			t.Errorf("%s: Run() = %+v, want a refusal for good without the value", ref, res)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: the command ran despite the refused secret", ref)
		}
	}
}

func TestSecretPolicyFlags(t *testing.T) {
	t.Parallel()
	var p SecretPolicy
	for _, spec := range []string{"acme/analytics=HOOK_TOKEN", "acme/analytics=DB_PASSWORD, ETL_*", "acme/*=SHARED"} {
		if err := p.AddEnv(spec); err != nil {
			t.Fatalf("AddEnv(%q) = %v", spec, err)
		}
	}
	for _, spec := range []string{"acme/analytics=/run/secrets/analytics/", "acme/*=/run/secrets/shared"} {
		if err := p.AddDir(spec); err != nil {
			t.Fatalf("AddDir(%q) = %v", spec, err)
		}
	}
	if got := strings.Join(p.Env["acme/analytics"], " "); got != "HOOK_TOKEN DB_PASSWORD ETL_*" {
		t.Errorf("Env[acme/analytics] = %q", got)
	}
	if got := strings.Join(p.Env["acme/*"], " "); got != "SHARED" {
		t.Errorf("Env[acme/*] = %q", got)
	}
	if got := p.Dirs["acme/analytics"]; len(got) != 1 || got[0] != "/run/secrets/analytics" {
		t.Errorf("Dirs[acme/analytics] = %q, want the folder cleaned", got)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	for _, bad := range []string{"HOOK_TOKEN", "=HOOK_TOKEN", "acme/analytics=", "acme/analytics=A,,B", "acme/analytics=[", "acme/analytics=A/B",
		"*/analytics=A", "acme/=A", "/analytics=A", "Acme/analytics=A", "acme/ana lytics=A", "acme/analytics/x=A"} {
		if err := p.AddEnv(bad); err == nil {
			t.Errorf("AddEnv(%q) = nil, want an error", bad)
		}
	}
	for _, bad := range []string{"/run/secrets", "=/run/secrets", "acme/analytics=", "acme/analytics=run/secrets", "acme/analytics=../x", "*/*=/run/secrets"} {
		if err := p.AddDir(bad); err == nil {
			t.Errorf("AddDir(%q) = nil, want an error", bad)
		}
	}
	for _, bad := range []*SecretPolicy{
		{Dirs: map[string][]string{"acme/x": {"relative"}}},
		{Dirs: map[string][]string{"x": {"/abs"}}},
		{Env: map[string][]string{"*": {"A"}}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
}

// The grants of old named a namespace alone, which every tenant's
// namespace of that name matched: refused, with the grant to write now.
func TestSecretPolicyRefusesGrantsWithoutATenant(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string]string{
		"analytics=HOOK_TOKEN": "a grant names its tenant: write TENANT/analytics=HOOK_TOKEN (default/analytics=HOOK_TOKEN for the default tenant)",
		"*=SHARED":             "never to every tenant's: write TENANT/*=SHARED for every namespace of TENANT",
		"*/etl=SHARED":         "never to every tenant's: name the tenant instead of *",
	} {
		var p SecretPolicy
		if err := p.AddEnv(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("AddEnv(%q) = %v, want an error containing %q", spec, err, want)
		}
	}
	var p SecretPolicy
	if err := p.AddDir("analytics=/run/secrets"); err == nil || !strings.Contains(err.Error(), "write TENANT/analytics=/run/secrets") {
		t.Errorf("AddDir(old form) = %v, want the new form in the error", err)
	}
}
