// Package access says who calls: API keys, the principals they stand for,
// and the roles those principals hold.
//
// A key is "ork_" followed by 43 characters of base64url (256 random
// bits). Only its SHA-256 is stored: a slow hash (bcrypt, argon2id) guards
// guessable passwords, and buys nothing against a key of full entropy,
// while it would cost every request tens of milliseconds. The first 12
// characters are kept as the key's prefix, shown in lists and in the audit
// trail, so a key can be recognised and revoked without being seen again.
//
// Roles are per tenant for now: reader (every read), editor (plus create,
// update, delete, pause, resume, trigger, cancel, apply) and admin (plus
// dead-letter replay and key management). A key acts in its own tenant
// only.
package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/engine/job"
	"github.com/orrery-dev/orrery/engine/store"
)

// Role is what a principal may do in its tenant.
type Role string

// The roles, weakest first.
const (
	Reader Role = "reader"
	Editor Role = "editor"
	Admin  Role = "admin"
)

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

// ParseRole reads a role name.
func ParseRole(s string) (Role, error) {
	if r := Role(s); r.rank() > 0 {
		return r, nil
	}
	return "", &InvalidError{Field: "role", Message: fmt.Sprintf("%q: want reader, editor or admin", s)}
}

// Principal is who a request acts as.
type Principal struct {
	Tenant     uuid.UUID
	TenantName string
	Name       string
	Role       Role
	// KeyPrefix names the key used ("" when authentication is off).
	KeyPrefix string
}

// Actor is the principal as the engine records it (audit rows name the
// key's prefix beside the principal).
func (p Principal) Actor() job.Actor {
	name := p.Name
	if p.KeyPrefix != "" {
		name += " (" + p.KeyPrefix + ")"
	}
	return job.Actor{Tenant: p.Tenant, Name: name}
}

// ErrUnauthenticated is returned for a missing, malformed, unknown,
// revoked or expired key: one error, so a caller learns nothing of which.
var ErrUnauthenticated = errors.New("access: a valid API key is required (Authorization: Bearer ork_...)")

// ErrNotFound is returned by Revoke for a prefix that names no live key of
// the caller's tenant (another tenant's key included).
var ErrNotFound = errors.New("access: no such live key in this tenant")

// InvalidError is a bad argument to Create: Field names it (tenant,
// principal, role, expires_in).
type InvalidError struct {
	Field, Message string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Message }

const (
	keyPrefix  = "ork_"
	keyBytes   = 32
	shownChars = 12
)

// Keys creates, verifies and revokes API keys. Verified keys are cached
// for CacheTTL: a key revoked (or expired) on another node stops working
// here within that time; one revoked through this Keys stops at once.
type Keys struct {
	pool *pgxpool.Pool
	// CacheTTL is how long a verified key is trusted without asking the
	// database again; 0 asks every time. NewKeys sets DefaultCacheTTL.
	CacheTTL time.Duration

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cached
}

type cached struct {
	p       Principal
	until   time.Time  // this process's clock: when to ask again
	expires *time.Time // the key's own expiry, if any
}

// DefaultCacheTTL is how long a verified key is trusted by default.
const DefaultCacheTTL = 10 * time.Second

// maxCached bounds the cache; past it, the cache starts over.
const maxCached = 10_000

// NewKeys returns Keys on the state database.
func NewKeys(pool *pgxpool.Pool) *Keys {
	return &Keys{pool: pool, CacheTTL: DefaultCacheTTL, cache: map[[sha256.Size]byte]cached{}}
}

// Key is a stored key, without its secret.
type Key struct {
	ID uuid.UUID
	// Tenant is the tenant's name (set by Create; List leaves it empty:
	// its caller named the tenant).
	Tenant    string
	Principal string
	Role      Role
	Prefix    string
	ExpiresAt *time.Time
	CreatedAt time.Time
	CreatedBy string
	// RevokedAt is set by List for a revoked key.
	RevokedAt *time.Time
}

// Create makes a key for principal in tenant (creating the tenant when
// createTenant is set), with role and an optional lifetime, and returns
// its secret: shown once, never stored. The key's creation is audited in
// the same transaction.
func (k *Keys) Create(ctx context.Context, tenant, principal string, role Role, ttl time.Duration, createdBy string, createTenant bool) (string, Key, error) {
	switch {
	case tenant == "" || len(tenant) > 63:
		return "", Key{}, &InvalidError{Field: "tenant", Message: "1 to 63 characters"}
	case principal == "" || len(principal) > 200:
		return "", Key{}, &InvalidError{Field: "principal", Message: "1 to 200 characters"}
	case role.rank() == 0:
		return "", Key{}, &InvalidError{Field: "role", Message: fmt.Sprintf("%q: want reader, editor or admin", role)}
	case ttl < 0:
		return "", Key{}, &InvalidError{Field: "expires_in", Message: "must not be negative"}
	}
	raw := make([]byte, keyBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", Key{}, err
	}
	secret := keyPrefix + base64.RawURLEncoding.EncodeToString(raw)
	h := sha256.Sum256([]byte(secret))
	key := Key{ID: uuid.Must(uuid.NewV7()), Tenant: tenant, Principal: principal, Role: role, Prefix: secret[:shownChars]}
	err := store.InTx(ctx, k.pool, func(q *store.Queries) error {
		tenantID, err := q.TenantByName(ctx, tenant)
		if store.IsNotFound(err) && createTenant {
			tenantID = uuid.Must(uuid.NewV7())
			err = q.InsertTenant(ctx, store.InsertTenantParams{ID: tenantID, Name: tenant})
		}
		if store.IsNotFound(err) {
			return fmt.Errorf("access: no tenant %q", tenant)
		}
		if err != nil {
			return err
		}
		p := store.InsertAPIKeyParams{ID: key.ID, TenantID: tenantID, Principal: principal, Role: string(role),
			Prefix: key.Prefix, Hash: h[:], CreatedBy: createdBy}
		// now() is the transaction's start: the key's created_at too.
		now, err := q.DatabaseNow(ctx)
		if err != nil {
			return err
		}
		key.CreatedAt, key.CreatedBy = now, createdBy
		if ttl > 0 {
			exp := now.Add(ttl)
			p.ExpiresAt, key.ExpiresAt = &exp, &exp
		}
		if err := q.InsertAPIKey(ctx, p); err != nil {
			return err
		}
		after := fmt.Sprintf(`{"principal":%q,"role":%q,"prefix":%q}`, principal, role, key.Prefix)
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: tenantID, Actor: createdBy,
			Action: "create_api_key", TargetKind: "api_key", TargetID: key.ID, TargetName: key.Prefix, After: []byte(after)})
	})
	if err != nil {
		return "", Key{}, err
	}
	return secret, key, nil
}

// Verify returns the principal of a live key.
func (k *Keys) Verify(ctx context.Context, secret string) (Principal, error) {
	if !strings.HasPrefix(secret, keyPrefix) || len(secret) != len(keyPrefix)+base64.RawURLEncoding.EncodedLen(keyBytes) {
		return Principal{}, ErrUnauthenticated
	}
	h := sha256.Sum256([]byte(secret))
	now := time.Now()
	k.mu.Lock()
	c, ok := k.cache[h]
	k.mu.Unlock()
	if ok && now.Before(c.until) && (c.expires == nil || now.Before(*c.expires)) {
		return c.p, nil
	}
	row, err := store.New(k.pool).APIKeyByHash(ctx, h[:])
	if store.IsNotFound(err) {
		k.forget(h)
		return Principal{}, ErrUnauthenticated
	}
	if err != nil {
		return Principal{}, err
	}
	p := Principal{Tenant: row.TenantID, TenantName: row.TenantName, Name: row.Principal, Role: Role(row.Role), KeyPrefix: row.Prefix}
	if k.CacheTTL > 0 {
		k.mu.Lock()
		if len(k.cache) >= maxCached {
			clear(k.cache)
		}
		k.cache[h] = cached{p: p, until: now.Add(k.CacheTTL), expires: row.ExpiresAt}
		k.mu.Unlock()
	}
	return p, nil
}

func (k *Keys) forget(h [sha256.Size]byte) {
	k.mu.Lock()
	delete(k.cache, h)
	k.mu.Unlock()
}

// forgetPrefix drops the cached key with this prefix (a revocation here).
func (k *Keys) forgetPrefix(prefix string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for h, c := range k.cache {
		if c.p.KeyPrefix == prefix {
			delete(k.cache, h)
		}
	}
}

// Revoke ends the key with this prefix in the caller's tenant, audited.
func (k *Keys) Revoke(ctx context.Context, by Principal, prefix string) error {
	defer k.forgetPrefix(prefix)
	return store.InTx(ctx, k.pool, func(q *store.Queries) error {
		row, err := q.RevokeAPIKey(ctx, store.RevokeAPIKeyParams{TenantID: by.Tenant, Prefix: prefix})
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: %q", ErrNotFound, prefix)
		}
		if err != nil {
			return err
		}
		before := fmt.Sprintf(`{"principal":%q,"role":%q,"prefix":%q}`, row.Principal, row.Role, prefix)
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: by.Tenant, Actor: by.Actor().Name,
			Action: "revoke_api_key", TargetKind: "api_key", TargetID: row.ID, TargetName: prefix, Before: []byte(before)})
	})
}

// List returns the keys of a tenant, live, expired and revoked, oldest
// first; never their secrets or hashes.
func (k *Keys) List(ctx context.Context, tenant uuid.UUID) ([]Key, error) {
	rows, err := store.New(k.pool).ListAPIKeys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]Key, len(rows))
	for i, r := range rows {
		out[i] = Key{ID: r.ID, Principal: r.Principal, Role: Role(r.Role), Prefix: r.Prefix, ExpiresAt: r.ExpiresAt,
			CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy, RevokedAt: r.RevokedAt}
	}
	return out, nil
}
