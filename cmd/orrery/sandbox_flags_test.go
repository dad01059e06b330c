package main

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
)

// devFlags parses args as `orrery dev` flags and applies dev's sandbox
// defaults.
func devFlags(t *testing.T, args ...string) stackFlags {
	t.Helper()
	var st stackFlags
	fs := pflag.NewFlagSet("dev", pflag.ContinueOnError)
	st.register(fs, true)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	devSandbox(fs, &st)
	return st
}

// `orrery dev` allows what its examples need only for the sandbox flags
// the user did not give; a flag given replaces the default, never adds to
// it (dev used to run every command whatever --allow-command said).
func TestDevSandboxDefaults(t *testing.T) {
	if newDevCmd(&globals{}).Flags().Changed("allow-command") {
		t.Fatal("dev marks --allow-command as set before parsing: a user's value would be added to *, not replace it")
	}
	tests := []struct {
		name                          string
		args                          []string
		allowCommand, egress, secrets []string
	}{
		{
			name: "defaults", args: []string{"--addr", "127.0.0.1:8080"},
			allowCommand: []string{"*"}, egress: []string{"127.0.0.0/8", "::1/128"}, secrets: []string{"default/analytics=HOOK_TOKEN"},
		},
		{
			name: "wildcard address: the sink is on 127.0.0.1", args: []string{"--addr", "0.0.0.0:8080"},
			allowCommand: []string{"*"}, egress: []string{"127.0.0.0/8", "::1/128"}, secrets: []string{"default/analytics=HOOK_TOKEN"},
		},
		{
			name: "the sink on another address is allowed too", args: []string{"--addr", "192.0.2.10:8080"},
			allowCommand: []string{"*"}, egress: []string{"127.0.0.0/8", "::1/128", "192.0.2.10/32"}, secrets: []string{"default/analytics=HOOK_TOKEN"},
		},
		{
			name:         "flags given replace the defaults",
			args:         []string{"--allow-command", "/opt/etl/*", "--allow-egress", "10.0.0.0/8", "--secret-env", "acme/etl=DB_PASSWORD"},
			allowCommand: []string{"/opt/etl/*"}, egress: []string{"10.0.0.0/8"}, secrets: []string{"acme/etl=DB_PASSWORD"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := devFlags(t, tt.args...)
			if !slices.Equal(st.allowCommand, tt.allowCommand) || !slices.Equal(st.allowEgress, tt.egress) || !slices.Equal(st.secretEnv, tt.secrets) {
				t.Errorf("allow-command %q, allow-egress %q, secret-env %q\nwant          %q, %q, %q",
					st.allowCommand, st.allowEgress, st.secretEnv, tt.allowCommand, tt.egress, tt.secrets)
			}
		})
	}
}

// With --allow-command given, dev's worker refuses the programs it does
// not name.
func TestDevHonoursAllowCommand(t *testing.T) {
	st := devFlags(t, "--allow-command", "/opt/etl/*")
	cfg, err := st.sandbox(worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	got := (&executor.CommandRunner{Allow: cfg.AllowCommand}).Run(context.Background(),
		executor.Call{Executor: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/sh", "-c", "exit 0"}}}})
	if got.OK || !strings.Contains(got.Error, "is not allowed on this worker") {
		t.Fatalf("Run() = %+v, want /bin/sh refused", got)
	}
}

func TestSandboxFlags(t *testing.T) {
	var st stackFlags
	fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	st.register(fs, false)
	err := fs.Parse([]string{
		"--allow-command", "/opt/etl/*", "--allow-egress", "127.0.0.1/32", "--allow-egress", "10.1.0.0/16,::1",
		"--secret-env", "acme/analytics=HOOK_TOKEN,DB_*", "--secret-env", "acme/*=SHARED", "--secret-dir", "acme/analytics=/run/secrets/analytics",
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := st.sandbox(worker.Config{Name: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "kept" || !slices.Equal(cfg.AllowCommand, []string{"/opt/etl/*"}) {
		t.Errorf("cfg = %+v", cfg)
	}
	if got := fmt.Sprint(cfg.AllowEgress); got != fmt.Sprint([]netip.Prefix{
		netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("::1/128")}) {
		t.Errorf("AllowEgress = %s", got)
	}
	if got := fmt.Sprint(cfg.Secrets.Env, cfg.Secrets.Dirs); got != "map[acme/*:[SHARED] acme/analytics:[HOOK_TOKEN DB_*]] map[acme/analytics:[/run/secrets/analytics]]" {
		t.Errorf("Secrets = %s", got)
	}

	for _, tt := range []struct{ args, wantErr string }{
		{"--allow-command=bin/*", "--allow-command: "},
		{"--allow-egress=localhost", "--allow-egress \"localhost\""},
		{"--secret-env=HOOK_TOKEN", "--secret-env \"HOOK_TOKEN\""},
		{"--secret-env=analytics=HOOK_TOKEN", "--secret-env \"analytics=HOOK_TOKEN\": a grant names its tenant: write TENANT/analytics=HOOK_TOKEN"},
		{"--secret-dir=acme/analytics=relative", "--secret-dir \"acme/analytics=relative\""},
	} {
		var st stackFlags
		fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
		st.register(fs, false)
		if err := fs.Parse([]string{tt.args}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.sandbox(worker.Config{}); err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
			t.Errorf("%s: error %v, want it to start with %q", tt.args, err, tt.wantErr)
		}
	}
}
