package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/orrery-dev/orrery/dag"
)

// Secret references: secret://env/NAME and secret://file/PATH. They are
// resolved on the worker when the attempt runs, through the worker's
// SecretPolicy; their values appear in no payload, log, error or audit row.
const secretPrefix = "secret://"

// SecretPolicy says which secrets the steps of each namespace may read on
// this worker. Its keys are scopes, TENANT/NAMESPACE, or TENANT/* for
// every namespace of one tenant: a grant always names its tenant, since
// namespace names are each tenant's own to choose (another tenant's
// namespace of the same name must not read the secret). The tenant a
// step runs for is read from the database with its task, never from the
// job's text. The zero value (and a nil *SecretPolicy) lets no step read
// any secret.
type SecretPolicy struct {
	// Env maps a scope to the environment variables its
	// secret://env/NAME references may read: names, or path.Match
	// patterns such as HOOK_*.
	Env map[string][]string
	// Dirs maps a scope to the folders (absolute paths) its
	// secret://file/PATH references may read files in, at any depth. The
	// file is opened by its real path (symlinks resolved), which must
	// still be inside the folder's real path.
	Dirs map[string][]string
}

// Scope is the key of a SecretPolicy for a tenant's namespace.
func Scope(tenant, namespace string) string { return tenant + "/" + namespace }

// checkScope checks a policy key: TENANT/NAMESPACE or TENANT/*, with
// names as tenants and namespaces are named. The form of old, a bare
// NAMESPACE (or *), granted the secret to every tenant's namespace of
// that name; its error says how to write the grant now.
func checkScope(scope, rest string) error {
	tenant, ns, ok := strings.Cut(scope, "/")
	switch {
	case !ok && scope == "*":
		return fmt.Errorf("a secret is granted to one tenant's namespaces, never to every tenant's: write TENANT/*%s for every namespace of TENANT", rest)
	case !ok:
		return fmt.Errorf("a grant names its tenant: write TENANT/%s%s (default/%s%s for the default tenant)", scope, rest, scope, rest)
	case tenant == "*":
		return fmt.Errorf("a secret is granted to one tenant's namespaces, never to every tenant's: name the tenant instead of *")
	}
	if err := dag.ValidateName(tenant); err != nil {
		return fmt.Errorf("tenant %q: %w", tenant, err)
	}
	if ns != "*" {
		if err := dag.ValidateName(ns); err != nil {
			return fmt.Errorf("namespace %q: %w", ns, err)
		}
	}
	return nil
}

// AddEnv adds a --secret-env value: TENANT/NAMESPACE=NAME[,NAME...].
func (p *SecretPolicy) AddEnv(spec string) error {
	scope, names, ok := strings.Cut(spec, "=")
	if !ok || scope == "" || names == "" {
		return fmt.Errorf("%q: want TENANT/NAMESPACE=NAME[,NAME...] (NAMESPACE * for every namespace of TENANT)", spec)
	}
	if err := checkScope(scope, "="+names); err != nil {
		return fmt.Errorf("%q: %w", spec, err)
	}
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		if err := checkEnvPattern(n); err != nil {
			return fmt.Errorf("%q: %w", spec, err)
		}
		if p.Env == nil {
			p.Env = map[string][]string{}
		}
		p.Env[scope] = append(p.Env[scope], n)
	}
	return nil
}

// AddDir adds a --secret-dir value: TENANT/NAMESPACE=/path.
func (p *SecretPolicy) AddDir(spec string) error {
	scope, dir, ok := strings.Cut(spec, "=")
	if !ok || scope == "" || dir == "" {
		return fmt.Errorf("%q: want TENANT/NAMESPACE=/path (NAMESPACE * for every namespace of TENANT)", spec)
	}
	if err := checkScope(scope, "="+dir); err != nil {
		return fmt.Errorf("%q: %w", spec, err)
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%q: the folder must be an absolute path", spec)
	}
	if p.Dirs == nil {
		p.Dirs = map[string][]string{}
	}
	p.Dirs[scope] = append(p.Dirs[scope], filepath.Clean(dir))
	return nil
}

// Validate checks a policy built by hand: scopes that name a tenant,
// folders absolute, patterns well formed.
func (p *SecretPolicy) Validate() error {
	if p == nil {
		return nil
	}
	for scope, names := range p.Env {
		if err := checkScope(scope, ""); err != nil {
			return fmt.Errorf("secret policy: scope %q: %w", scope, err)
		}
		for _, n := range names {
			if err := checkEnvPattern(n); err != nil {
				return fmt.Errorf("secret policy: scope %q: %w", scope, err)
			}
		}
	}
	for scope, dirs := range p.Dirs {
		if err := checkScope(scope, ""); err != nil {
			return fmt.Errorf("secret policy: scope %q: %w", scope, err)
		}
		for _, d := range dirs {
			if !filepath.IsAbs(d) {
				return fmt.Errorf("secret policy: scope %q: folder %q is not an absolute path", scope, d)
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
// policy lets the tenant's namespace read it.
func (p *SecretPolicy) resolve(tenant, namespace, v string) (string, *secretError) {
	ref, ok := strings.CutPrefix(v, secretPrefix)
	if !ok {
		return v, nil
	}
	kind, name, _ := strings.Cut(ref, "/")
	switch kind {
	case "env":
		if !p.envAllowed(tenant, namespace, name) {
			return "", &secretError{refused: true, msg: fmt.Sprintf(
				"secret %s: namespace %q may not read this environment variable on this worker (--secret-env)", v, Scope(tenant, namespace))}
		}
		val, ok := os.LookupEnv(name)
		if !ok {
			return "", &secretError{msg: fmt.Sprintf("secret %s: environment variable %s is not set on this worker", v, name)}
		}
		return val, nil
	case "file":
		b, err := p.readFile(tenant, namespace, "/"+strings.TrimPrefix(name, "/"))
		if err != nil {
			err.msg = fmt.Sprintf("secret %s: %s", v, err.msg)
			return "", err
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", &secretError{refused: true, msg: fmt.Sprintf("secret %s: use secret://env/NAME or secret://file/PATH", v)}
}

// rules returns the policy's entries for the tenant's namespace and for
// every namespace of the tenant.
func rules(m map[string][]string, tenant, namespace string) []string {
	if tenant == "" || namespace == "" { // a call that does not say whose it is reads nothing
		return nil
	}
	return append(append([]string(nil), m[Scope(tenant, namespace)]...), m[Scope(tenant, "*")]...)
}

func (p *SecretPolicy) envAllowed(tenant, namespace, name string) bool {
	if p == nil || name == "" {
		return false
	}
	return matchesAny(rules(p.Env, tenant, namespace), name)
}

// readFile reads the file at the absolute path file if it lies inside one
// of namespace's folders: lexically (file cleaned of . and ..), and once
// every symlink is resolved (inside the real path of one of them). The
// read goes through an os.Root of that folder, so a symlink swapped in
// after the check cannot lead it out. The errors name no path beyond the
// reference and carry no OS error.
func (p *SecretPolicy) readFile(tenant, namespace, file string) ([]byte, *secretError) {
	var dirs, realDirs []string
	if p != nil {
		for _, dir := range rules(p.Dirs, tenant, namespace) {
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
			"namespace %q may not read this file on this worker: it is outside the folders allowed (--secret-dir)", Scope(tenant, namespace))}
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
		"namespace %q may not read this file on this worker: it resolves outside the folders allowed (--secret-dir)", Scope(tenant, namespace))}
}

// within reports whether the clean absolute path file is dir or inside it.
func within(dir, file string) bool {
	rel, err := filepath.Rel(dir, file)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

func toString(v any) string { return fmt.Sprint(v) }

func itoa(n int) string { return fmt.Sprint(n) }

// Resolve returns v with a secret reference replaced by its value, if the
// policy lets the tenant's namespace read it (for webhooks outside steps:
// package notify). A nil policy resolves none.
func (p *SecretPolicy) Resolve(tenant, namespace, v string) (string, error) {
	val, err := p.resolve(tenant, namespace, v)
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
