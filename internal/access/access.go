package access

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/store"
)

// Role is what a principal may do.
type Role string

// The roles, weakest first. None is a key's tenant-wide role when the key
// acts only where it was granted. Worker is a remote worker's key: it may
// claim, renew and report attempts of the types and namespaces it holds
// (Principal.Worker) and nothing else; it allows none of the others.
// Publisher is a key that publishes events to its tenant
// (EventService.Publish) and does nothing else.
const (
	None      Role = "none"
	Worker    Role = "worker"
	Publisher Role = "publisher"
	Reader    Role = "reader"
	Editor    Role = "editor"
	Admin     Role = "admin"
)

// Single reports whether r is a key's one purpose (worker, publisher):
// such a key does that and nothing else, and grants made to its
// principal's name do not reach it.
func (r Role) Single() bool { return r == Worker || r == Publisher }

// rank orders roles: a role allows what every weaker one allows.
func (r Role) rank() int {
	switch r {
	case Reader:
		return 1
	case Editor:
		return 2
	case Admin:
		return 3
	}
	return 0
}

// Allows reports whether r includes need.
func (r Role) Allows(need Role) bool { return r.rank() >= need.rank() && need.rank() > 0 }

// max returns the more permissive of r and o.
func (r Role) max(o Role) Role {
	if o.rank() > r.rank() {
		return o
	}
	return r
}

// ParseRole reads a role that can be granted: reader, editor or admin.
func ParseRole(s string) (Role, error) {
	if r := Role(s); r.rank() > 0 {
		return r, nil
	}
	return "", &dag.FieldError{Field: "role", Message: fmt.Sprintf("%q: want reader, editor or admin", s)}
}

// ParseKeyRole reads a key's tenant-wide role: none, reader, editor,
// admin or worker.
func ParseKeyRole(s string) (Role, error) {
	if s == string(None) || Role(s).Single() {
		return Role(s), nil
	}
	if r := Role(s); r.rank() > 0 {
		return r, nil
	}
	return "", &dag.FieldError{Field: "role", Message: fmt.Sprintf("%q: want none, reader, editor, admin, worker or publisher", s)}
}

// Resource is what a call acts on: the whole tenant (the zero value), a
// namespace (Job empty), one job, or the system (tenant management).
type Resource struct {
	System    bool
	Namespace string
	Job       string
}

// The resources beyond namespaces and jobs.
var (
	TenantWide = Resource{}
	System     = Resource{System: true}
)

// Principal is who a request acts as.
type Principal struct {
	Tenant     uuid.UUID
	TenantName string
	Name       string
	// Role is the key's tenant-wide role (None: only what Grants give).
	Role Role
	// SystemAdmin may create and list tenants and make keys in any tenant.
	SystemAdmin bool
	// Grants are the principal's grants in its tenant. Shared with the
	// key cache: never modified.
	Grants []Grant
	// KeyPrefix names the key used ("" when authentication is off).
	KeyPrefix string
	// KeyID is the key's id (uuid.Nil when authentication is off).
	KeyID uuid.UUID
	// Worker is what a worker key (Role Worker) may serve; nil for others.
	Worker *WorkerScope
}

// WorkerScope is what a worker key may claim: steps of these types ("*":
// any) in these namespaces (none: any of its tenant).
type WorkerScope struct {
	Types      []string
	Namespaces []string
}

// AllowsType reports whether the scope serves steps of type t.
func (w *WorkerScope) AllowsType(t string) bool {
	return w != nil && (slices.Contains(w.Types, "*") || slices.Contains(w.Types, t))
}

// AllowsNamespace reports whether the scope serves namespace ns.
func (w *WorkerScope) AllowsNamespace(ns string) bool {
	return w != nil && (len(w.Namespaces) == 0 || slices.Contains(w.Namespaces, ns))
}

// RoleOn is the most permissive role p holds on r: its tenant-wide role,
// or a grant on r's namespace, or a grant on r's job.
func (p Principal) RoleOn(r Resource) Role {
	if r.System {
		if p.SystemAdmin {
			return Admin
		}
		return None
	}
	best := p.Role
	if r.Namespace == "" {
		return best
	}
	for _, g := range p.Grants {
		if g.Namespace == r.Namespace && (g.Job == "" || g.Job == r.Job) {
			best = best.max(g.Role)
		}
	}
	return best
}

// HasAnyRole reports whether p may read something: a tenant-wide role, a
// grant, or system admin.
func (p Principal) HasAnyRole() bool {
	return p.Role.Allows(Reader) || len(p.Grants) > 0 || p.SystemAdmin
}

// Scope is what p's lists show: nil (the whole tenant) with a tenant-wide
// role, else the namespaces and jobs it was granted.
func (p Principal) Scope() *job.Scope {
	if p.Role.Allows(Reader) {
		return nil
	}
	s := &job.Scope{Namespaces: []string{}, Jobs: []string{}}
	for _, g := range p.Grants {
		if g.Job == "" {
			s.Namespaces = append(s.Namespaces, g.Namespace)
		} else {
			s.Jobs = append(s.Jobs, g.Namespace+"/"+g.Job)
		}
	}
	return s
}

// Actor is the principal as the engine sees it: audit rows name the key's
// prefix beside the principal, and lists are narrowed to its Scope.
func (p Principal) Actor() job.Actor {
	name := p.Name
	if p.KeyPrefix != "" {
		name += " (" + p.KeyPrefix + ")"
	}
	a := job.Actor{Tenant: p.Tenant, Name: name, Principal: p.Name, Scope: p.Scope(), Key: p.KeyID}
	a.Holds = func(namespace, name, role string) bool {
		return p.RoleOn(Resource{Namespace: namespace, Job: name}).Allows(Role(role))
	}
	if !p.Role.Allows(Editor) {
		a.MayRun = func(namespace, name string) bool {
			return p.RoleOn(Resource{Namespace: namespace, Job: name}).Allows(Editor)
		}
	}
	return a
}

// KeyMayRun reports whether the key key (a live one: not revoked nor
// expired) of tenant may start runs of job namespace/name: its principal's
// role there (the key's tenant-wide role, or a grant) allows editor, the
// role a trigger needs. A step that runs a job asks it when it starts, of
// the key that last wrote its job (job_calls.author_key); uuid.Nil (a job
// written without a key) may.
func KeyMayRun(ctx context.Context, q *store.Queries, tenant, key uuid.UUID, namespace, name string) (bool, error) {
	if key == uuid.Nil {
		return true, nil
	}
	row, err := q.KeyByID(ctx, key)
	if store.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	p := Principal{Tenant: row.TenantID, Name: row.Principal, Role: Role(row.Role), KeyPrefix: row.Prefix, KeyID: row.ID}
	if p.Tenant != tenant || p.Role.Single() {
		return false, nil
	}
	if p.Grants, err = principalGrants(ctx, q, row.TenantID, row.Principal); err != nil {
		return false, err
	}
	return p.RoleOn(Resource{Namespace: namespace, Job: name}).Allows(Editor), nil
}

// ErrUnauthenticated is returned for a missing, malformed, unknown,
// revoked or expired key: one error, so a caller learns nothing of which.
var ErrUnauthenticated = errors.New("access: a valid API key is required (Authorization: Bearer ork_...)")

// ErrNotFound is returned for a key prefix, a grant or a tenant that does
// not exist where the caller looked (another tenant's included).
var ErrNotFound = errors.New("access: not found")

// ErrExists is returned when creating a tenant whose name is taken.
var ErrExists = errors.New("access: already exists")
