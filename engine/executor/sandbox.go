package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Sandbox runs command steps inside bubblewrap (bwrap, Debian's
// bubblewrap package): in new user, PID, IPC, UTS, cgroup and network
// namespaces, with a /proc of their own (no other process's environ or
// files), an empty /tmp, the system's programs and libraries read-only,
// a few files of /etc, and nothing else of the machine's files but the
// paths the worker allows. bwrap's own environment is the step's, so its
// PID 1 holds nothing of the worker's either.
type Sandbox struct {
	// Bwrap is the path of bwrap.
	Bwrap string
	// ReadOnly and ReadWrite are the further paths steps may read, and
	// read and write (absolute, cleaned, their symlinks resolved).
	ReadOnly  []string
	ReadWrite []string
	// Network shares the worker's network; default none (only a loopback
	// of the step's own).
	Network bool
}

// systemDirs are bound read-only (or recreated as the symlinks they are):
// the programs and libraries steps run.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are the files of /etc a program expects (the loader's cache,
// time zone, users and groups without their passwords, certificates).
var etcFiles = []string{"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/ssl/certs", "/etc/ca-certificates", "/etc/mime.types"}

// netFiles are bound as well when the network is shared.
var netFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/gai.conf", "/etc/host.conf"}

// ErrNoSandbox is a sandbox that cannot run on this machine.
var ErrNoSandbox = errors.New("the sandbox is not available")

// NewSandbox finds bwrap on PATH, checks the paths, and proves the
// sandbox works here (user namespaces allowed) by running /bin/true in it
// as the user steps will run as (user; nil: this process's). Its error
// says what is missing: ErrNoSandbox when bwrap is missing or does not
// run here.
func NewSandbox(readOnly, readWrite []string, network bool, user *syscall.Credential) (*Sandbox, error) {
	s := &Sandbox{Network: network}
	for _, p := range []struct {
		in   []string
		out  *[]string
		flag string
	}{{readOnly, &s.ReadOnly, "--sandbox-ro"}, {readWrite, &s.ReadWrite, "--sandbox-rw"}} {
		for _, path := range p.in {
			real, err := sandboxPath(path)
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", p.flag, path, err)
			}
			*p.out = append(*p.out, real)
		}
	}
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, fmt.Errorf("%w: bwrap is not installed (Debian: apt-get install bubblewrap)", ErrNoSandbox)
	}
	s.Bwrap = bw
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Bwrap, s.args("/bin/true", nil, "")...)
	cmd.Env = []string{"PATH=" + CommandPath}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: user}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: bwrap does not run here (%v): %s", ErrNoSandbox, err, strings.TrimSpace(stderr.String()))
	}
	return s, nil
}

// sandboxPath is an allowed path as the sandbox binds it: absolute,
// cleaned, its symlinks resolved, existing.
func sandboxPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", errors.New("not an absolute path")
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return "", err
	}
	if real == "/" {
		return "", errors.New("the whole file system is not a sandbox")
	}
	return real, nil
}

// Visible reports whether path (real, absolute) of this machine is seen
// in the sandbox: in a system folder or an allowed path (the sandbox's
// /tmp is its own, empty).
func (s *Sandbox) Visible(path string) bool {
	for _, dirs := range [][]string{systemDirs, s.ReadOnly, s.ReadWrite} {
		for _, d := range dirs {
			if real, err := filepath.EvalSymlinks(d); err == nil && within(real, path) || within(d, path) {
				return true
			}
		}
	}
	return false
}

// args are bwrap's arguments to run program with argv[1:] in dir ("" is
// /tmp).
func (s *Sandbox) args(program string, argv []string, dir string) []string {
	a := []string{"--die-with-parent", "--unshare-all", "--new-session", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"}
	if s.Network {
		a = append(a, "--share-net")
	}
	if os.Geteuid() == 0 {
		a = append(a, "--cap-drop", "ALL")
	}
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", target, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	files := etcFiles
	if s.Network {
		files = append(files[:len(files):len(files)], netFiles...)
	}
	for _, f := range files {
		a = append(a, "--ro-bind-try", f, f)
	}
	for _, p := range s.ReadOnly {
		a = append(a, "--ro-bind", p, p)
	}
	for _, p := range s.ReadWrite {
		a = append(a, "--bind", p, p)
	}
	if dir == "" {
		dir = "/tmp"
	}
	a = append(a, "--chdir", dir, "--", program)
	if len(argv) > 1 {
		a = append(a, argv[1:]...)
	}
	return a
}
