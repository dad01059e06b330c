package access_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The most permissive applicable role wins: tenant-wide, then the grant on
// the namespace, then the grant on the job; a grant on one job says
// nothing of its namespace or of its neighbours.
func TestRoleOnIsTheMostPermissiveApplicable(t *testing.T) {
	t.Parallel()
	p := access.Principal{Role: access.Reader, Grants: []access.Grant{
		{Namespace: "team-a", Role: access.Editor},
		{Namespace: "team-a", Job: "deploy", Role: access.Admin},
		{Namespace: "team-b", Job: "etl", Role: access.Editor},
		{Namespace: "team-c", Role: access.Reader}, // weaker than tenant-wide: changes nothing
	}}
	for _, c := range []struct {
		name string
		on   access.Resource
		want access.Role
	}{
		{"tenant-wide", access.TenantWide, access.Reader},
		{"namespace grant", access.Resource{Namespace: "team-a"}, access.Editor},
		{"job in a granted namespace", access.Resource{Namespace: "team-a", Job: "x"}, access.Editor},
		{"job grant above its namespace's", access.Resource{Namespace: "team-a", Job: "deploy"}, access.Admin},
		{"job grant", access.Resource{Namespace: "team-b", Job: "etl"}, access.Editor},
		{"the job grant's namespace", access.Resource{Namespace: "team-b"}, access.Reader},
		{"the job grant's neighbour", access.Resource{Namespace: "team-b", Job: "other"}, access.Reader},
		{"a weaker grant", access.Resource{Namespace: "team-c", Job: "x"}, access.Reader},
		{"no grant", access.Resource{Namespace: "team-z", Job: "x"}, access.Reader},
		{"system", access.System, access.None},
	} {
		if got := p.RoleOn(c.on); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if p.Scope() != nil {
		t.Error("a tenant-wide reader's lists are scoped")
	}
	p.Role = access.None
	s := p.Scope()
	if s == nil || !slices.Equal(s.Namespaces, []string{"team-a", "team-c"}) || !slices.Equal(s.Jobs, []string{"team-a/deploy", "team-b/etl"}) {
		t.Errorf("scope without a tenant-wide role: %+v", s)
	}
	if got := p.RoleOn(access.TenantWide); got != access.None {
		t.Errorf("grants give no tenant-wide role: %s", got)
	}
	if !p.HasAnyRole() || (access.Principal{Role: access.None}).HasAnyRole() {
		t.Error("HasAnyRole")
	}
}

// Grants are loaded with the key and cached with it: a grant changed
// through the same Service applies at once, one changed through another
// (another server) within CacheTTL.
func TestGrantChangesReachTheKeyCache(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	here, there := access.New(pool), access.New(pool)
	here.CacheTTL, there.CacheTTL = 300*time.Millisecond, time.Hour
	admin := access.Principal{Tenant: job.DefaultTenant, TenantName: "default", Name: "admin", Role: access.Admin}
	secret, _, err := here.Create(ctx, access.NewKey{Tenant: "default", Principal: "alice", Role: access.None, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	team := access.Resource{Namespace: "team", Job: "x"}
	roleOn := func(s *access.Service) access.Role {
		t.Helper()
		p, err := s.Verify(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		return p.RoleOn(team)
	}
	if r := roleOn(here); r != access.None {
		t.Fatalf("before any grant: %s", r)
	}
	if r := roleOn(there); r != access.None {
		t.Fatalf("before any grant, there: %s", r)
	}
	if _, err := here.GrantRole(ctx, admin, access.Grant{Principal: "alice", Namespace: "team", Role: access.Editor}); err != nil {
		t.Fatal(err)
	}
	if r := roleOn(here); r != access.Editor {
		t.Fatalf("granted through the same Service: %s at once, want editor", r)
	}
	if r := roleOn(there); r != access.None {
		t.Fatalf("there, within its hour-long cache: %s (the cache is not used?)", r)
	}
	if err := there.RevokeGrant(ctx, admin, access.Grant{Principal: "alice", Namespace: "team"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for roleOn(here) != access.None {
		if time.Now().After(deadline) {
			t.Fatal("a grant revoked on another server still applies after the cache TTL")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A key keeps at most MaxSessionsPerKey web sessions: signing in again
// ends the oldest, so no key grows the sessions table without bound.
func TestSessionsPerKeyAreBounded(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	acc := access.New(pool)
	acc.CacheTTL = 0
	secret, _, err := acc.Create(ctx, access.NewKey{Tenant: "default", Principal: "ops", Role: access.Reader, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var first access.Session
	for i := range access.MaxSessionsPerKey + 5 {
		s, err := acc.StartSession(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = s
		}
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM web_sessions"); n != access.MaxSessionsPerKey {
		t.Fatalf("%d sessions kept, want %d", n, access.MaxSessionsPerKey)
	}
	if _, err := acc.Session(ctx, first.Token); err != access.ErrUnauthenticated {
		t.Fatalf("the oldest session after %d more sign-ins: %v", access.MaxSessionsPerKey+4, err)
	}
}

// A principal names a person or a service: text that could pass for
// something else in the audit trail ("dev-admin (ork_Fi78qW5h)"), or that
// the database cannot hold, is refused by field; the audit row of a key
// is JSON whatever its principal.
func TestPrincipalsAreNames(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	acc := access.New(pool)
	for _, p := range []string{"", "dev-admin (ork_Fi78qW5h)", "a\x01b", "a\x00", "a b", "-x"} {
		var inv *dag.FieldError
		if _, _, err := acc.Create(ctx, access.NewKey{Tenant: "default", Principal: p, Role: access.Reader, CreatedBy: "test"}); !errors.As(err, &inv) || inv.Field != "principal" {
			t.Errorf("principal %q: %v, want an error on principal", p, err)
		}
	}
	for _, p := range []string{"alice", "ci:deploy", "bob@example.com", "team/bot", "svc.a+b_c-d"} {
		if _, _, err := acc.Create(ctx, access.NewKey{Tenant: "default", Principal: p, Role: access.Reader, CreatedBy: "test"}); err != nil {
			t.Errorf("principal %q: %v", p, err)
		}
	}
	if n := enginetest.Int(t, pool, "SELECT count(*)::int FROM audit_log WHERE target_kind = 'api_key' AND (after->>'principal') IS NOT NULL"); n != 5 {
		t.Errorf("%d key audit rows read as JSON, want 5", n)
	}
	// A grant made before the rule can still be revoked; a lookup by a
	// principal no row can hold is refused by field.
	admin := access.Principal{Tenant: job.DefaultTenant, TenantName: "default", Name: "admin", Role: access.Admin}
	if _, err := pool.Exec(ctx, `INSERT INTO grants (id, tenant_id, principal, namespace, role, created_at, created_by)
		VALUES (gen_random_uuid(), $1, 'Jane Doe', 'team', 'reader', now(), 'test')`, job.DefaultTenant); err != nil {
		t.Fatal(err)
	}
	if err := acc.RevokeGrant(ctx, admin, access.Grant{Principal: "Jane Doe", Namespace: "team"}); err != nil {
		t.Errorf("revoking an older grant: %v", err)
	}
	var inv *dag.FieldError
	if _, _, err := acc.ListGrants(ctx, job.DefaultTenant, access.GrantFilter{Principal: "a\x00"}); !errors.As(err, &inv) || inv.Field != "principal" {
		t.Errorf("listing by a principal with a NUL: %v, want an error on principal", err)
	}
}

// A worker key serves WorkerService and nothing else: it verifies with its
// scope and without the grants its principal's name holds, it cannot sign
// in to the web UI, and a key of another role cannot carry a scope.
func TestWorkerKeysHoldTheirScopeOnly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	acc := access.New(pool)
	admin, _, err := acc.Create(ctx, access.NewKey{Tenant: "default", Principal: "alice", Role: access.Admin, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := acc.Verify(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acc.GrantRole(ctx, p, access.Grant{Principal: "alice", Namespace: "prod", Role: access.Editor}); err != nil {
		t.Fatal(err)
	}
	secret, _, err := acc.Create(ctx, access.NewKey{Tenant: "default", Principal: "alice", Role: access.Worker, WorkerTypes: []string{"invoice"},
		WorkerNamespaces: []string{"billing"}, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := acc.Verify(ctx, secret)
	if err != nil || w.Role != access.Worker || len(w.Grants) != 0 || !w.Worker.AllowsType("invoice") || w.Worker.AllowsType("other") ||
		!w.Worker.AllowsNamespace("billing") || w.Worker.AllowsNamespace("prod") || w.HasAnyRole() {
		t.Fatalf("worker key: %+v %v", w, err)
	}
	if _, err := acc.StartSession(ctx, secret); !errors.Is(err, access.ErrUnauthenticated) {
		t.Fatalf("a worker key signing in: %v", err)
	}
	for _, bad := range []access.NewKey{
		{Tenant: "default", Principal: "x", Role: access.Worker},
		{Tenant: "default", Principal: "x", Role: access.Reader, WorkerTypes: []string{"invoice"}},
		{Tenant: "default", Principal: "x", Role: access.Worker, WorkerTypes: []string{"Bad Type"}},
		{Tenant: "default", Principal: "x", Role: access.Worker, WorkerTypes: []string{"*"}, SystemAdmin: true},
	} {
		bad.CreatedBy = "test"
		var fe *dag.FieldError
		if _, _, err := acc.Create(ctx, bad); !errors.As(err, &fe) {
			t.Errorf("%+v: %v, want a field error", bad, err)
		}
	}
}
