package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"time"

	"github.com/orrery-dev/orrery/internal/store"
)

// SessionTTL is how long a web UI session lasts from sign-in;
// MaxSessionsPerKey how many one key keeps (signing in again ends the
// oldest beyond it).
const (
	SessionTTL        = 12 * time.Hour
	MaxSessionsPerKey = 20
)

// Session is a signed-in web UI session. Token goes in the session cookie
// (only its SHA-256 is stored); CSRF must come back with every form.
type Session struct {
	Token, CSRF string
	Principal   Principal
}

func randomToken() string {
	b := make([]byte, keyBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// StartSession signs in with an API key: a session that acts as the key
// (and ends when the key is revoked or expires) for SessionTTL.
// ErrUnauthenticated for a key that does not verify.
func (k *Service) StartSession(ctx context.Context, secret string) (Session, error) {
	p, err := k.Verify(ctx, secret)
	if err != nil {
		return Session{}, err
	}
	if p.Role.Single() {
		// A worker key claims, renews and reports attempts, a publisher
		// key publishes, nothing else: no web session (whose principal
		// would read its name's grants).
		return Session{}, ErrUnauthenticated
	}
	s := Session{Token: randomToken(), CSRF: randomToken(), Principal: p}
	h := sha256.Sum256([]byte(s.Token))
	err = store.InTx(ctx, k.pool, func(q *store.Queries) error {
		if err := q.PruneWebSessions(ctx); err != nil {
			return err
		}
		if err := q.InsertWebSession(ctx, store.InsertWebSessionParams{Hash: h[:], KeyID: p.KeyID, Csrf: s.CSRF,
			TtlSeconds: SessionTTL.Seconds()}); err != nil {
			return err
		}
		return q.TrimKeySessions(ctx, store.TrimKeySessionsParams{KeyID: p.KeyID, Keep: MaxSessionsPerKey})
	})
	if err != nil {
		return Session{}, err
	}
	return s, nil
}

// Session returns the principal and CSRF token of a live session; it is
// cached for CacheTTL like a verified key (a key revoked or a grant
// changed here applies at once, elsewhere within CacheTTL).
// ErrUnauthenticated for an unknown, ended or expired session.
func (k *Service) Session(ctx context.Context, token string) (Session, error) {
	if token == "" || len(token) > 64 {
		return Session{}, ErrUnauthenticated
	}
	c, err := k.guardedRead(sourceOf(ctx), k.sessions, sha256.Sum256([]byte(token)), func(h [sha256.Size]byte) (cached, error) {
		q := store.New(k.pool)
		row, err := q.WebSessionByHash(ctx, h[:])
		if err != nil {
			return cached{}, err
		}
		grants, err := principalGrants(ctx, q, row.TenantID, row.Principal)
		expires := row.ExpiresAt
		if row.KeyExpiresAt != nil && row.KeyExpiresAt.Before(expires) {
			expires = *row.KeyExpiresAt
		}
		return cached{p: Principal{Tenant: row.TenantID, TenantName: row.TenantName, Name: row.Principal, Role: Role(row.Role),
			SystemAdmin: row.SystemAdmin, Grants: grants, KeyPrefix: row.Prefix, KeyID: row.KeyID}, csrf: row.Csrf, expires: &expires}, err
	})
	if err != nil {
		return Session{}, err
	}
	return Session{Token: token, CSRF: c.csrf, Principal: c.p}, nil
}

// EndSession signs out: the session stops at once on this server, and on
// others within CacheTTL.
func (k *Service) EndSession(ctx context.Context, token string) error {
	h := sha256.Sum256([]byte(token))
	k.mu.Lock()
	delete(k.sessions, h)
	k.gen++
	k.mu.Unlock()
	return store.New(k.pool).DeleteWebSession(ctx, h[:])
}
