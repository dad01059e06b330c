package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Secret references: secret://env/NAME and secret://file/PATH. They are
// resolved on the worker when the attempt runs, through the worker's
// SecretPolicy; their values appear in no payload, log, error or audit row.
const secretPrefix = "secret://"

// SecretPolicy says which secrets the steps of each namespace may read on
// this worker. The key "*" applies to every namespace. The zero value
// (and a nil *SecretPolicy) lets no step read any secret.
type SecretPolicy struct {
	// Env maps a namespace to the environment variables its
	// secret://env/NAME references may read: names, or path.Match
	// patterns such as HOOK_*.
	Env map[string][]string
	// Dirs maps a namespace to the folders (absolute paths) its
	// secret://file/PATH references may read files in, at any depth. The
	// file is opened by its real path (symlinks resolved), which must
	// still be inside the folder's real path.
	Dirs map[string][]string
}

// AddEnv adds a --secret-env value: NAMESPACE=NAME[,NAME...].
func (p *SecretPolicy) AddEnv(spec string) error {
	ns, names, ok := strings.Cut(spec, "=")
	if !ok || ns == "" || names == "" {
		return fmt.Errorf("%q: want NAMESPACE=NAME[,NAME...] (NAMESPACE * for every namespace)", spec)
	}
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		if err := checkEnvPattern(n); err != nil {
			return fmt.Errorf("%q: %w", spec, err)
		}
		if p.Env == nil {
			p.Env = map[string][]string{}
		}
		p.Env[ns] = append(p.Env[ns], n)
	}
	return nil
}

// AddDir adds a --secret-dir value: NAMESPACE=/path.
func (p *SecretPolicy) AddDir(spec string) error {
	ns, dir, ok := strings.Cut(spec, "=")
	if !ok || ns == "" || dir == "" {
		return fmt.Errorf("%q: want NAMESPACE=/path (NAMESPACE * for every namespace)", spec)
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%q: the folder must be an absolute path", spec)
	}
	if p.Dirs == nil {
		p.Dirs = map[string][]string{}
	}
	p.Dirs[ns] = append(p.Dirs[ns], filepath.Clean(dir))
	return nil
}

// Validate checks a policy built by hand: folders absolute, patterns
// well formed.
func (p *SecretPolicy) Validate() error {
	if p == nil {
		return nil
	}
	for ns, names := range p.Env {
		for _, n := range names {
			if err := checkEnvPattern(n); err != nil {
				return fmt.Errorf("secret policy: namespace %q: %w", ns, err)
			}
		}
	}
	for ns, dirs := range p.Dirs {
		for _, d := range dirs {
			if !filepath.IsAbs(d) {
				return fmt.Errorf("secret policy: namespace %q: folder %q is not an absolute path", ns, d)
			}
		}
	}
	return nil
}

// secretError is a reference that did not resolve. A refused one (the
// policy's answer, or a malformed reference) is the step's problem and not
// worth retrying; otherwise the secret is missing on this worker, which
// another worker, or this one later, may have.
type secretError struct {
	msg     string
	refused bool
}

func (e *secretError) Error() string { return e.msg }

func (e *secretError) result() Result {
	if e.refused {
		return Result{ExitReason: ReasonError, FailureClass: ClassUser, Error: e.msg}
	}
	return Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true, Error: e.msg}
}

// resolve returns v with a secret reference replaced by its value, if the
// policy lets namespace read it.
func (p *SecretPolicy) resolve(namespace, v string) (string, *secretError) {
	ref, ok := strings.CutPrefix(v, secretPrefix)
	if !ok {
		return v, nil
	}
	kind, name, _ := strings.Cut(ref, "/")
	switch kind {
	case "env":
		if !p.envAllowed(namespace, name) {
			return "", &secretError{refused: true, msg: fmt.Sprintf(
				"secret %s: namespace %q may not read this environment variable on this worker (--secret-env)", v, namespace)}
		}
		val, ok := os.LookupEnv(name)
		if !ok {
			return "", &secretError{msg: fmt.Sprintf("secret %s: environment variable %s is not set on this worker", v, name)}
		}
		return val, nil
	case "file":
		b, err := p.readFile(namespace, "/"+strings.TrimPrefix(name, "/"))
		if err != nil {
			err.msg = fmt.Sprintf("secret %s: %s", v, err.msg)
			return "", err
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", &secretError{refused: true, msg: fmt.Sprintf("secret %s: use secret://env/NAME or secret://file/PATH", v)}
}

// rules returns the policy's entries for namespace and for "*".
func rules(m map[string][]string, namespace string) []string {
	return append(append([]string(nil), m[namespace]...), m["*"]...)
}

func (p *SecretPolicy) envAllowed(namespace, name string) bool {
	if p == nil || name == "" {
		return false
	}
	return matchesAny(rules(p.Env, namespace), name)
}

// readFile reads the file at the absolute path file if it lies inside one
// of namespace's folders: lexically (file cleaned of . and ..), and once
// every symlink is resolved (inside the real path of one of them). The
// read goes through an os.Root of that folder, so a symlink swapped in
// after the check cannot lead it out. The errors name no path beyond the
// reference and carry no OS error.
func (p *SecretPolicy) readFile(namespace, file string) ([]byte, *secretError) {
	var dirs, realDirs []string
	if p != nil {
		for _, dir := range rules(p.Dirs, namespace) {
			if real, err := filepath.EvalSymlinks(dir); err == nil { // else the folder is missing on this worker
				dirs, realDirs = append(dirs, dir), append(realDirs, real)
			}
		}
	}
	file = filepath.Clean(file)
	inside := false
	for i := range dirs {
		inside = inside || within(dirs[i], file) || within(realDirs[i], file)
	}
	if !inside {
		return nil, &secretError{refused: true, msg: fmt.Sprintf(
			"namespace %q may not read this file on this worker: it is outside the folders allowed (--secret-dir)", namespace)}
	}
	unreadable := &secretError{msg: "cannot read the file on this worker"}
	realFile, err := filepath.EvalSymlinks(file)
	if err != nil {
		return nil, unreadable
	}
	for _, realDir := range realDirs {
		if !within(realDir, realFile) {
			continue
		}
		rel, _ := filepath.Rel(realDir, realFile)
		root, err := os.OpenRoot(realDir)
		if err != nil {
			return nil, unreadable
		}
		defer root.Close()
		b, err := root.ReadFile(rel)
		if err != nil {
			return nil, unreadable
		}
		return b, nil
	}
	return nil, &secretError{refused: true, msg: fmt.Sprintf(
		"namespace %q may not read this file on this worker: it resolves outside the folders allowed (--secret-dir)", namespace)}
}

// within reports whether the clean absolute path file is dir or inside it.
func within(dir, file string) bool {
	rel, err := filepath.Rel(dir, file)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

func toString(v any) string { return fmt.Sprint(v) }

func itoa(n int) string { return fmt.Sprint(n) }

// Resolve returns v with a secret reference replaced by its value, if the
// policy lets namespace read it (for webhooks outside steps: package
// notify). A nil policy resolves none.
func (p *SecretPolicy) Resolve(namespace, v string) (string, error) {
	val, err := p.resolve(namespace, v)
	if err != nil {
		return "", err
	}
	return val, nil
}

// Refused reports whether err is a secret reference the policy refuses
// (as opposed to one it allows but cannot read now).
func Refused(err error) bool {
	var se *secretError
	return errors.As(err, &se) && se.refused
}
