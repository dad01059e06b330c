package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/store"
)

const (
	keyPrefix  = "ork_"
	keyBytes   = 32
	shownChars = 12
)

// Service creates, verifies and revokes API keys, grants roles and
// creates tenants. Verified keys are cached with their principal's grants
// for CacheTTL (see the package doc).
type Service struct {
	pool *pgxpool.Pool
	// CacheTTL is how long a verified key is trusted without asking the
	// database again; 0 asks every time. New sets DefaultCacheTTL.
	CacheTTL time.Duration

	mu       sync.Mutex
	cache    map[[sha256.Size]byte]cached // verified keys, by hash
	sessions map[[sha256.Size]byte]cached // web sessions, by the token's hash
	// gen counts forgets: a verification that read the database while one
	// happened does not cache what it read, which may predate it.
	gen uint64
	// throttle refuses sources that fail verification too often, and keys
	// that just failed, without a lookup (throttle.go).
	throttle *throttle
}

type cached struct {
	p       Principal
	csrf    string     // a session's CSRF token
	until   time.Time  // this process's clock: when to ask again
	expires *time.Time // the key's (or session's) own expiry, if any
}

// valid reports whether a cached entry may still be used at now.
func (c cached) valid(now time.Time) bool {
	return now.Before(c.until) && (c.expires == nil || now.Before(*c.expires))
}

// DefaultCacheTTL is how long a verified key is trusted by default.
const DefaultCacheTTL = 10 * time.Second

// maxCached bounds the cache; past it, the cache starts over.
const maxCached = 10_000

// New returns a Service on the state database.
func New(pool *pgxpool.Pool) *Service {
	return &Service{pool: pool, CacheTTL: DefaultCacheTTL, cache: map[[sha256.Size]byte]cached{}, sessions: map[[sha256.Size]byte]cached{},
		throttle: newThrottle()}
}

// Key is a stored key, without its secret.
type Key struct {
	ID uuid.UUID
	// Tenant is the tenant's name (set by Create; List leaves it empty:
	// its caller named the tenant).
	Tenant      string
	Principal   string
	Role        Role
	SystemAdmin bool
	Prefix      string
	ExpiresAt   *time.Time
	CreatedAt   time.Time
	CreatedBy   string
	// RevokedAt is set by List for a revoked key.
	RevokedAt *time.Time
	// WorkerTypes and WorkerNamespaces are a worker key's scope.
	WorkerTypes      []string
	WorkerNamespaces []string
}

// NewKey is what Create makes.
type NewKey struct {
	Tenant    string // the tenant's name
	Principal string // 1 to 200 characters
	Role      Role   // tenant-wide: none, reader, editor or admin
	// SystemAdmin lets the key create and list tenants and make keys in
	// any tenant.
	SystemAdmin bool
	TTL         time.Duration // 0: the key never expires
	CreatedBy   string        // the actor, as the audit trail names it
	// CreateTenant creates the tenant when it does not exist (for keys
	// made on the database, `orrery keys create --db`).
	CreateTenant bool
	// WorkerTypes are the step types a worker key (Role Worker) may claim:
	// at least one, "*" for any. WorkerNamespaces narrows it to these
	// namespaces; none: every namespace of its tenant.
	WorkerTypes      []string
	WorkerNamespaces []string
}

// MaxWorkerScope bounds a worker key's types and namespaces, and what a
// remote worker's calls name of them.
const MaxWorkerScope = 64

func (n NewKey) validate() error {
	switch {
	case n.Tenant == "" || len(n.Tenant) > 63:
		return &dag.FieldError{Field: "tenant", Message: "1 to 63 characters"}
	case !validPrincipal(n.Principal):
		return principalError
	case n.Role != None && !n.Role.Single() && n.Role.rank() == 0:
		return &dag.FieldError{Field: "role", Message: fmt.Sprintf("%q: want none, reader, editor, admin, worker or publisher", n.Role)}
	case n.Role == Publisher && n.SystemAdmin:
		return &dag.FieldError{Field: "system_admin", Message: "a publisher key cannot be a system admin"}
	case n.TTL < 0:
		return &dag.FieldError{Field: "expires_in", Message: "must not be negative"}
	case n.Role != Worker && len(n.WorkerTypes)+len(n.WorkerNamespaces) > 0:
		return &dag.FieldError{Field: "worker_types", Message: "only a worker key (role worker) serves types and namespaces"}
	case n.Role == Worker && n.SystemAdmin:
		return &dag.FieldError{Field: "system_admin", Message: "a worker key cannot be a system admin"}
	case n.Role == Worker && len(n.WorkerTypes) == 0:
		return &dag.FieldError{Field: "worker_types", Message: "a worker key needs at least one type (\"*\" for any)"}
	case len(n.WorkerTypes) > MaxWorkerScope || len(n.WorkerNamespaces) > MaxWorkerScope:
		return &dag.FieldError{Field: "worker_types", Message: fmt.Sprintf("at most %d types and %d namespaces", MaxWorkerScope, MaxWorkerScope)}
	}
	for i, t := range n.WorkerTypes {
		if err := dag.ValidateName(t); t != "*" && err != nil {
			return &dag.FieldError{Field: fmt.Sprintf("worker_types[%d]", i), Message: err.Error()}
		}
	}
	for i, ns := range n.WorkerNamespaces {
		if err := dag.ValidateName(ns); err != nil {
			return &dag.FieldError{Field: fmt.Sprintf("worker_namespaces[%d]", i), Message: err.Error()}
		}
	}
	return nil
}

const maxPrincipal = 200

// principalRE: a principal names a person or a service (an email, a
// "ci:deploy"), never text that could read as something else in the
// audit trail (spaces, brackets, control characters).
var principalRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+:/-]*$`)

func validPrincipal(p string) bool { return len(p) <= maxPrincipal && principalRE.MatchString(p) }

// lookupPrincipal refuses a principal to look up (a revoke, a filter)
// that no row can hold: empty, too long, a NUL or invalid UTF-8.
func lookupPrincipal(p string) error {
	if p == "" || len(p) > maxPrincipal || !dag.IsText(p) {
		return &dag.FieldError{Field: "principal", Message: "1 to 200 characters of text"}
	}
	return nil
}

var principalError = &dag.FieldError{Field: "principal", Message: "1 to 200 characters: letters, digits and . _ @ + : / -, starting with a letter or digit"}

// Create makes a key and returns its secret: shown once, never stored.
// The key's creation is audited in the key's tenant, in the same
// transaction.
func (k *Service) Create(ctx context.Context, n NewKey) (string, Key, error) {
	if err := n.validate(); err != nil {
		return "", Key{}, err
	}
	raw := make([]byte, keyBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", Key{}, err
	}
	secret := keyPrefix + base64.RawURLEncoding.EncodeToString(raw)
	h := sha256.Sum256([]byte(secret))
	key := Key{ID: uuid.Must(uuid.NewV7()), Tenant: n.Tenant, Principal: n.Principal, Role: n.Role, SystemAdmin: n.SystemAdmin,
		Prefix: secret[:shownChars], CreatedBy: n.CreatedBy, WorkerTypes: n.WorkerTypes, WorkerNamespaces: n.WorkerNamespaces}
	err := store.InTx(ctx, k.pool, func(q *store.Queries) error {
		tenantID, err := q.TenantByName(ctx, n.Tenant)
		if store.IsNotFound(err) && n.CreateTenant {
			tenantID = uuid.Must(uuid.NewV7())
			err = q.InsertTenant(ctx, newTenant(tenantID, n.Tenant))
		}
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: no tenant %q", ErrNotFound, n.Tenant)
		}
		if err != nil {
			return err
		}
		p := store.InsertAPIKeyParams{ID: key.ID, TenantID: tenantID, Principal: n.Principal, Role: string(n.Role),
			SystemAdmin: n.SystemAdmin, Prefix: key.Prefix, Hash: h[:], CreatedBy: n.CreatedBy,
			WorkerTypes: jsonList(n.WorkerTypes), WorkerNamespaces: jsonList(n.WorkerNamespaces)}
		// now() is the transaction's start: the key's created_at too.
		now, err := q.DatabaseNow(ctx)
		if err != nil {
			return err
		}
		key.CreatedAt = now
		if n.TTL > 0 {
			exp := now.Add(n.TTL)
			p.ExpiresAt, key.ExpiresAt = &exp, &exp
		}
		if err := q.InsertAPIKey(ctx, p); err != nil {
			return err
		}
		audited := map[string]any{"principal": n.Principal, "role": n.Role, "system_admin": n.SystemAdmin, "prefix": key.Prefix}
		if n.Role == Worker {
			audited["worker_types"], audited["worker_namespaces"] = n.WorkerTypes, n.WorkerNamespaces
		}
		after := auditJSON(audited)
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: tenantID, Actor: n.CreatedBy,
			Action: "create_api_key", TargetKind: "api_key", TargetID: key.ID, TargetName: key.Prefix, After: []byte(after)})
	})
	if err != nil {
		return "", Key{}, err
	}
	return secret, key, nil
}

// Verify returns the principal of a live key.
func (k *Service) Verify(ctx context.Context, secret string) (Principal, error) {
	source := sourceOf(ctx)
	if !strings.HasPrefix(secret, keyPrefix) || len(secret) != len(keyPrefix)+base64.RawURLEncoding.EncodedLen(keyBytes) {
		k.throttle.fail(source, time.Now())
		return Principal{}, ErrUnauthenticated
	}
	c, err := k.guardedRead(source, k.cache, sha256.Sum256([]byte(secret)), func(h [sha256.Size]byte) (cached, error) {
		q := store.New(k.pool)
		row, err := q.APIKeyByHash(ctx, h[:])
		if err != nil {
			return cached{}, err
		}
		p := Principal{Tenant: row.TenantID, TenantName: row.TenantName, Name: row.Principal, Role: Role(row.Role),
			SystemAdmin: row.SystemAdmin, KeyPrefix: row.Prefix, KeyID: row.ID}
		if p.Role == Worker {
			// A worker key serves its scope and nothing else: grants made
			// to its principal's name do not reach it.
			p.Worker = &WorkerScope{Types: listJSON(row.WorkerTypes), Namespaces: listJSON(row.WorkerNamespaces)}
			return cached{p: p, expires: row.ExpiresAt}, nil
		}
		if p.Role == Publisher { // publishes, and nothing else: no grants either
			return cached{p: p, expires: row.ExpiresAt}, nil
		}
		p.Grants, err = principalGrants(ctx, q, row.TenantID, row.Principal)
		return cached{p: p, expires: row.ExpiresAt}, err
	})
	return c.p, err
}

// cachedRead returns the entry of h in m (the keys' or the sessions'
// cache) while it is valid, else reads it and caches it for CacheTTL,
// unless a forget happened while it was read (what it read may predate
// that change). A read that finds nothing is ErrUnauthenticated, and
// drops any stale entry.
func (k *Service) cachedRead(m map[[sha256.Size]byte]cached, h [sha256.Size]byte, read func([sha256.Size]byte) (cached, error)) (cached, error) {
	now := time.Now()
	k.mu.Lock()
	c, ok := m[h]
	gen := k.gen
	k.mu.Unlock()
	if ok && c.valid(now) {
		return c, nil
	}
	c, err := read(h)
	if store.IsNotFound(err) {
		k.mu.Lock()
		delete(m, h)
		k.mu.Unlock()
		return cached{}, ErrUnauthenticated
	}
	if err != nil {
		return cached{}, err
	}
	if k.CacheTTL > 0 {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.gen == gen {
			if len(m) >= maxCached {
				clear(m)
			}
			c.until = now.Add(k.CacheTTL)
			m[h] = c
		}
	}
	return c, nil
}

// forgetWhere drops the cached keys whose principal matches (a key
// revoked here, or a grant changed here).
func (k *Service) forgetWhere(match func(Principal) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++
	for _, m := range []map[[sha256.Size]byte]cached{k.cache, k.sessions} {
		for h, c := range m {
			if match(c.p) {
				delete(m, h)
			}
		}
	}
}

// Revoke ends the key with this prefix in the caller's tenant, audited.
func (k *Service) Revoke(ctx context.Context, by Principal, prefix string) error {
	defer k.forgetWhere(func(p Principal) bool { return p.KeyPrefix == prefix })
	return store.InTx(ctx, k.pool, func(q *store.Queries) error {
		row, err := q.RevokeAPIKey(ctx, store.RevokeAPIKeyParams{TenantID: by.Tenant, Prefix: prefix})
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: no live key %q in this tenant", ErrNotFound, prefix)
		}
		if err != nil {
			return err
		}
		before := auditJSON(map[string]any{"principal": row.Principal, "role": row.Role, "prefix": prefix})
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: by.Tenant, Actor: by.Actor().Name,
			Action: "revoke_api_key", TargetKind: "api_key", TargetID: row.ID, TargetName: prefix, Before: []byte(before)})
	})
}

// List returns the keys of a tenant, live, expired and revoked, oldest
// first; never their secrets or hashes.
func (k *Service) List(ctx context.Context, tenant uuid.UUID) ([]Key, error) {
	rows, err := store.New(k.pool).ListAPIKeys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]Key, len(rows))
	for i, r := range rows {
		out[i] = Key{ID: r.ID, Principal: r.Principal, Role: Role(r.Role), SystemAdmin: r.SystemAdmin, Prefix: r.Prefix, ExpiresAt: r.ExpiresAt,
			CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy, RevokedAt: r.RevokedAt,
			WorkerTypes: listJSON(r.WorkerTypes), WorkerNamespaces: listJSON(r.WorkerNamespaces)}
	}
	return out, nil
}

// jsonList is a list of names as a JSONB column holds it ([] for none).
func jsonList(names []string) []byte {
	b, _ := json.Marshal(append([]string{}, names...)) // strings: it cannot fail
	return b
}

// listJSON reads a JSONB list of names (nil when it is empty or not one).
func listJSON(b []byte) []string {
	var out []string
	_ = json.Unmarshal(b, &out)
	return out
}

// auditJSON is an audit row's before or after: JSON (Go's %q is not).
func auditJSON(v map[string]any) string {
	b, _ := json.Marshal(v) // strings and booleans: it cannot fail
	return string(b)
}
