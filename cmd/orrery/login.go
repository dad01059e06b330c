package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// clientConfig is what `orrery login` keeps in the user's config dir: the
// server client commands talk to when --server is not given, and the key
// they send to it.
type clientConfig struct {
	Server string `json:"server"`
	APIKey string `json:"api_key"`
}

// clientConfigPath is $XDG_CONFIG_HOME/orrery/config.json (or the
// platform's user config dir).
func clientConfigPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "orrery", "config.json"), nil
}

// loadClientConfig reads the login, if any; a missing file is no login.
func loadClientConfig() (clientConfig, error) {
	var c clientConfig
	path, err := clientConfigPath()
	if err != nil {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		return c, fmt.Errorf("%s: %w (remove it, or run orrery logout)", path, err)
	}
	return c, nil
}

// applyLogin fills --server and --api-key from the login when they were
// not given: the server when --server (ORRERY_SERVER) is unset, the key
// when talking to the server logged in to. Without a login, an unset
// --server is the address `orrery dev` recorded in its data dir (the
// project folder's dev stack, on whatever --addr it serves), else the
// flag's default.
func (g *globals) applyLogin(serverSet bool) {
	c, err := loadClientConfig()
	if err != nil {
		// A broken login must not stop a server, nor a client given
		// --server and --api-key.
		fmt.Fprintln(os.Stderr, "orrery: warning: ignoring the login:", err)
		return
	}
	if c.Server == "" {
		if dev := readDevFile(devServerFile); !serverSet && dev != "" {
			g.server = dev
		}
		return
	}
	if !serverSet {
		g.server = c.Server
	}
	if g.apiKey == "" && g.baseURL() == strings.TrimRight(c.Server, "/") {
		g.apiKey = c.APIKey
	}
}

// newLoginCmds are login, logout and whoami.
func newLoginCmds(g *globals) []*cobra.Command {
	login := &cobra.Command{
		Use:   "login [--server URL]",
		Short: "Check an API key (read from stdin) with the server and keep both in your config dir for later commands",
		Long: "Reads an API key from stdin (or --api-key), checks it with the server (WhoAmI), and writes the server\n" +
			"and key to $XDG_CONFIG_HOME/orrery/config.json (mode 0600). Later client commands use that server when\n" +
			"--server is not given, and the key when they talk to that server and no --api-key is given.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key := g.apiKey
			if key == "" {
				fmt.Fprint(cmd.ErrOrStderr(), "API key: ")
				line, err := bufio.NewReader(io.LimitReader(cmd.InOrStdin(), 4096)).ReadString('\n')
				if err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				key = strings.TrimSpace(line)
				fmt.Fprintln(cmd.ErrOrStderr())
			}
			if key == "" {
				return errors.New("no API key given (pipe it on stdin, or --api-key)")
			}
			g.apiKey = key
			res, err := g.accessClient().WhoAmI(cmd.Context(), connect.NewRequest(&orreryv1.WhoAmIRequest{}))
			if err != nil {
				return err
			}
			path, err := clientConfigPath()
			if err != nil {
				return err
			}
			b, _ := json.MarshalIndent(clientConfig{Server: g.baseURL(), APIKey: key}, "", "  ")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return err
			}
			if err := writePrivate(path, append(b, '\n')); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged in to %s as %s (saved in %s)\n", g.baseURL(), whoText(res.Msg), path)
			return nil
		},
	}
	logout := &cobra.Command{
		Use:   "logout",
		Short: "Forget the server and key `orrery login` kept (the key itself stays valid: revoke it with keys revoke)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := clientConfigPath()
			if err != nil {
				return err
			}
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "logged out")
			return nil
		},
	}
	whoami := &cobra.Command{
		Use:   "whoami",
		Short: "Show who your API key stands for: tenant, principal, role and grants",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := g.accessClient().WhoAmI(cmd.Context(), connect.NewRequest(&orreryv1.WhoAmIRequest{}))
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), whoText(res.Msg))
			for _, gr := range res.Msg.GetGrants() {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s on %s\n", gr.GetRole(), grantScope(gr.GetNamespace(), gr.GetJob()))
			}
			return nil
		},
	}
	return []*cobra.Command{login, logout, whoami}
}

func whoText(w *orreryv1.WhoAmIResponse) string {
	s := fmt.Sprintf("%s in tenant %s, tenant-wide role %s", w.GetPrincipal(), w.GetTenant(), w.GetRole())
	if w.GetSystemAdmin() {
		s += ", system admin"
	}
	if n := len(w.GetGrants()); n > 0 {
		s += fmt.Sprintf(", %d grant(s)", n)
	}
	return s
}

// writePrivate replaces the file at path with data, readable by its owner
// only: written to a new file (mode 0600) beside it and renamed over it,
// so that an existing file's wider mode is not kept and a symlink there
// is replaced, not followed.
func writePrivate(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".orrery-config-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename, there is nothing left to remove
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
