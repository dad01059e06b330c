package executor

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/dag"
)

// runEnv runs /usr/bin/env as a command step with stepEnv and returns
// the environment it printed.
func runEnv(t *testing.T, stepEnv map[string]string, secrets *SecretPolicy, allowEnv ...string) (map[string]string, Result) {
	t.Helper()
	c := testCall(dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/usr/bin/env"}, Env: stepEnv}})
	got := (&Runner{Command: &CommandRunner{Allow: []string{"/usr/bin/env"}, Secrets: secrets, AllowEnv: allowEnv}}).Run(context.Background(), c)
	if !got.OK {
		return nil, got
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(got.Output, "\n"), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("env printed %q", line)
		}
		env[k] = v
	}
	return env, got
}

// A command step's environment is the minimal set, not the worker's:
// the worker's HOOK_TOKEN (and anything else it holds) does not reach it.
// No t.Parallel: t.Setenv.
func TestCommandEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("HOOK_TOKEN", "Bearer worker-only")
	t.Setenv("SANDBOX_TEST_CANARY", "worker-only")
	t.Setenv("HOME", "/home/worker")
	t.Setenv("PATH", "/opt/worker/bin:"+os.Getenv("PATH"))
	t.Setenv("LD_PRELOAD", "")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("TZ", "Europe/Paris")

	env, res := runEnv(t, map[string]string{
		"STEP_VAR": "from the step",
		// The runner's own variables win over a step's.
		"ORRERY_ATTEMPT": "99",
	}, nil)
	if env == nil {
		t.Fatalf("Run() = %+v, want OK", res)
	}
	want := map[string]string{
		"PATH":                   "/usr/local/bin:/usr/bin:/bin",
		"LANG":                   "C.UTF-8",
		"TZ":                     "Europe/Paris",
		"STEP_VAR":               "from the step",
		"ORRERY_RUN_ID":          "11111111-2222-3333-4444-555555555555",
		"ORRERY_TASK_ID":         "66666666-7777-8888-9999-aaaaaaaaaaaa",
		"ORRERY_STEP":            "extract",
		"ORRERY_ATTEMPT":         "3",
		"ORRERY_SCHEDULED_FOR":   scheduledForUTC,
		"ORRERY_IDEMPOTENCY_KEY": "11111111-2222-3333-4444-555555555555/extract/3",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	for k := range env {
		if _, ok := want[k]; !ok {
			t.Errorf("the command got %s=%q, which is not in the minimal environment", k, env[k])
		}
	}
	if strings.Contains(res.Output, "worker-only") {
		t.Errorf("the worker's environment leaked into the command:\n%s", res.Output)
	}
	if strings.Count(res.Output, "ORRERY_ATTEMPT=") != 1 {
		t.Errorf("ORRERY_ATTEMPT appears more than once:\n%s", res.Output)
	}
}

// LANG and TZ are passed only when the worker has them; a step may set
// PATH, HOME or anything else the worker's --allow-env names. No
// t.Parallel: t.Setenv.
func TestCommandEnvironmentStepChoices(t *testing.T) {
	for _, k := range []string{"LANG", "TZ"} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	env, res := runEnv(t, map[string]string{"PATH": "/opt/etl/bin:/usr/bin", "HOME": "/srv/etl"}, nil, "PATH", "HOME")
	if env == nil {
		t.Fatalf("Run() = %+v, want OK", res)
	}
	if env["PATH"] != "/opt/etl/bin:/usr/bin" || env["HOME"] != "/srv/etl" {
		t.Errorf("PATH = %q, HOME = %q, want the step's", env["PATH"], env["HOME"])
	}
	var names []string
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	want := []string{"HOME", "ORRERY_ATTEMPT", "ORRERY_IDEMPOTENCY_KEY", "ORRERY_RUN_ID", "ORRERY_SCHEDULED_FOR", "ORRERY_STEP", "ORRERY_TASK_ID", "PATH"}
	if !slices.Equal(names, want) {
		t.Errorf("environment names = %q, want %q", names, want)
	}
}

// A secret the policy allows reaches the command through its env; one it
// refuses stops the step before it runs, for good. No t.Parallel: t.Setenv.
func TestCommandEnvironmentSecrets(t *testing.T) {
	t.Setenv("HOOK_TOKEN", "Bearer s3cr3t")
	allowEtl := &SecretPolicy{Env: map[string][]string{"acme/etl": {"HOOK_TOKEN"}}}
	env, res := runEnv(t, map[string]string{"TOKEN": "secret://env/HOOK_TOKEN"}, allowEtl)
	if env == nil || env["TOKEN"] != "Bearer s3cr3t" {
		t.Fatalf("Run() = %+v, want TOKEN set from the allowed secret", res)
	}
	if _, ok := env["HOOK_TOKEN"]; ok {
		t.Error("the command got HOOK_TOKEN itself; only TOKEN was asked for")
	}

	allowOther := &SecretPolicy{Env: map[string][]string{"acme/analytics": {"HOOK_TOKEN"}}}
	allowOtherTenant := &SecretPolicy{Env: map[string][]string{"globex/etl": {"HOOK_TOKEN"}, "globex/*": {"HOOK_TOKEN"}}}
	for name, policy := range map[string]*SecretPolicy{"no policy": nil, "another namespace's": allowOther,
		"another tenant's namespace of the same name": allowOtherTenant} {
		env, res := runEnv(t, map[string]string{"TOKEN": "secret://env/HOOK_TOKEN"}, policy)
		if env != nil {
			t.Fatalf("%s: the command ran with %v", name, env)
		}
		if !strings.Contains(res.Error, "secret://env/HOOK_TOKEN") || strings.Contains(res.Error, "s3cr3t") {
			t.Errorf("%s: Error = %q, want it to name the reference and not the value", name, res.Error)
		}
		res.Error = ""
		if want := (Result{ExitReason: ReasonError, FailureClass: ClassUser}); res != want {
			t.Errorf("%s: Run() = %+v\nwant    %+v", name, res, want)
		}
	}
}

// A step's env may not set what changes which code the allowed program
// runs (the loader, the shell, interpreters, tools' command hooks: with
// GIT_SSH_COMMAND an allowed git ran /bin/sh), unless the worker names
// it; with --allow-env, only the names it matches. Refused for good,
// before anything runs.
func TestCommandEnvironmentRefusesRiskyNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env   map[string]string
		allow []string
		want  string // "" means it runs
	}{
		{map[string]string{"GIT_SSH_COMMAND": "/bin/sh -c id"}, nil, "env GIT_SSH_COMMAND is refused on this worker"},
		{map[string]string{"LD_PRELOAD": "/tmp/x.so"}, nil, "env LD_PRELOAD is refused"},
		{map[string]string{"PATH": "/tmp"}, nil, "env PATH is refused"},
		{map[string]string{"PYTHONPATH": "/tmp"}, nil, "env PYTHONPATH is refused"},
		{map[string]string{"BASH_FUNC_echo%%": "() { id; }"}, nil, "is refused"},
		{map[string]string{"TAR_OPTIONS": "--checkpoint-action=exec=id"}, nil, "env TAR_OPTIONS is refused"},
		{map[string]string{"MAKEFILES": "/dev/stdin"}, nil, "env MAKEFILES is refused"},
		{map[string]string{"npm_config_script_shell": "/bin/sh"}, nil, "env npm_config_script_shell is refused"},
		{map[string]string{"ETL_DATE": "x", "PASSWORD": "y"}, nil, ""},
		{map[string]string{"ETL_DATE": "x"}, []string{"ETL_*"}, ""},
		{map[string]string{"PASSWORD": "y"}, []string{"ETL_*"}, "env PASSWORD is not allowed on this worker (--allow-env)"},
		{map[string]string{"GIT_SSH_COMMAND": "ssh -i /etc/etl/key"}, []string{"GIT_SSH_COMMAND"}, ""},
	} {
		env, res := runEnv(t, tc.env, nil, tc.allow...)
		switch {
		case tc.want == "" && env == nil:
			t.Errorf("env %v, allow %v: %+v, want it to run", tc.env, tc.allow, res)
		case tc.want != "" && (env != nil || !strings.Contains(res.Error, tc.want) || res.FailureClass != ClassUser || res.Retryable):
			t.Errorf("env %v, allow %v: %+v, want a refusal for good with %q", tc.env, tc.allow, res, tc.want)
		}
	}
}
