package access

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/store"
)

// Grant gives a principal a role on a namespace (Job empty) or on one job
// of it, in the grant's tenant.
type Grant struct {
	ID        uuid.UUID
	Principal string
	Namespace string
	Job       string
	Role      Role
	CreatedAt time.Time
	CreatedBy string
}

// Resource is what the grant is on.
func (g Grant) Resource() Resource { return Resource{Namespace: g.Namespace, Job: g.Job} }

// target names the grant in the audit trail: "principal on ns" or
// "principal on ns/job".
func (g Grant) target() string {
	if g.Job == "" {
		return g.Principal + " on " + g.Namespace
	}
	return g.Principal + " on " + g.Namespace + "/" + g.Job
}

// validate checks a grant to make (creating: the principal must be a
// name, validPrincipal) or to find (a revoke: any principal a grant may
// hold, those from before the rule included).
func (g Grant) validate(creating bool) error {
	if creating && !validPrincipal(g.Principal) {
		return principalError
	}
	if err := lookupPrincipal(g.Principal); err != nil {
		return err
	}
	if err := dag.ValidateName(g.Namespace); err != nil {
		return &dag.FieldError{Field: "namespace", Message: err.Error()}
	}
	if g.Job != "" {
		if err := dag.ValidateName(g.Job); err != nil {
			return &dag.FieldError{Field: "job", Message: err.Error()}
		}
	}
	if creating {
		if _, err := ParseRole(string(g.Role)); err != nil {
			return err
		}
	}
	return nil
}

func principalGrants(ctx context.Context, q *store.Queries, tenant uuid.UUID, principal string) ([]Grant, error) {
	rows, err := q.PrincipalGrants(ctx, store.PrincipalGrantsParams{TenantID: tenant, Principal: principal})
	if err != nil {
		return nil, err
	}
	out := make([]Grant, len(rows))
	for i, r := range rows {
		out[i] = Grant{Principal: principal, Namespace: r.Namespace, Job: r.JobName, Role: Role(r.Role)}
	}
	return out, nil
}

// GrantRole gives g.Principal g.Role on g's namespace or job in by's
// tenant, replacing the role it had there, audited (action grant_role,
// target kind grant, the role before and after). The caller's authority
// to grant is the API's to check. Verified keys of the principal cached
// here are forgotten at once.
func (k *Service) GrantRole(ctx context.Context, by Principal, g Grant) (Grant, error) {
	if err := g.validate(true); err != nil {
		return Grant{}, err
	}
	defer k.forgetPrincipal(by.Tenant, g.Principal)
	g.CreatedBy = by.Actor().Name
	err := store.InTx(ctx, k.pool, func(q *store.Queries) error {
		now, err := q.DatabaseNow(ctx)
		if err != nil {
			return err
		}
		g.CreatedAt = now
		old, err := q.GrantByScope(ctx, store.GrantByScopeParams{TenantID: by.Tenant, Principal: g.Principal, Namespace: g.Namespace, JobName: g.Job})
		var before []byte
		switch {
		case store.IsNotFound(err):
			g.ID = uuid.Must(uuid.NewV7())
			err = q.InsertGrant(ctx, store.InsertGrantParams{ID: g.ID, TenantID: by.Tenant, Principal: g.Principal,
				Namespace: g.Namespace, JobName: g.Job, Role: string(g.Role), CreatedBy: g.CreatedBy})
		case err == nil:
			g.ID = old.ID
			before = grantJSON(g, Role(old.Role))
			err = q.UpdateGrantRole(ctx, store.UpdateGrantRoleParams{ID: g.ID, Role: string(g.Role), CreatedBy: g.CreatedBy})
		}
		if err != nil {
			return err
		}
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: by.Tenant, Actor: g.CreatedBy,
			Action: "grant_role", TargetKind: "grant", TargetID: g.ID, TargetName: g.target(), Before: before, After: grantJSON(g, g.Role)})
	})
	if err != nil {
		return Grant{}, err
	}
	return g, nil
}

// RevokeGrant removes g.Principal's grant on g's namespace or job in by's
// tenant, audited (action revoke_grant). ErrNotFound when there is none.
func (k *Service) RevokeGrant(ctx context.Context, by Principal, g Grant) error {
	if err := g.validate(false); err != nil {
		return err
	}
	defer k.forgetPrincipal(by.Tenant, g.Principal)
	return store.InTx(ctx, k.pool, func(q *store.Queries) error {
		row, err := q.DeleteGrant(ctx, store.DeleteGrantParams{TenantID: by.Tenant, Principal: g.Principal, Namespace: g.Namespace, JobName: g.Job})
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: %s holds no grant on that", ErrNotFound, g.Principal)
		}
		if err != nil {
			return err
		}
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: by.Tenant, Actor: by.Actor().Name,
			Action: "revoke_grant", TargetKind: "grant", TargetID: row.ID, TargetName: g.target(), Before: grantJSON(g, Role(row.Role))})
	})
}

func grantJSON(g Grant, role Role) []byte {
	b, _ := json.Marshal(map[string]string{"principal": g.Principal, "namespace": g.Namespace, "job": g.Job, "role": string(role)})
	return b
}

// GrantFilter narrows ListGrants; empty fields do not filter.
type GrantFilter struct {
	Namespace string
	Principal string
	PageSize  int
	PageToken string
}

// MaxPageSize bounds every list of this package; DefaultPageSize is used
// when none is asked for.
const (
	MaxPageSize     = 1000
	DefaultPageSize = 100
)

type grantToken struct {
	Namespace, Job, Principal string
}

// ListGrants pages through the grants of a tenant by namespace, job and
// principal.
func (k *Service) ListGrants(ctx context.Context, tenant uuid.UUID, f GrantFilter) ([]Grant, string, error) {
	size, err := pageSize(f.PageSize)
	if err != nil {
		return nil, "", err
	}
	var after grantToken
	if err := decodeToken(f.PageToken, &after); err != nil {
		return nil, "", err
	}
	p := store.ListGrantsParams{TenantID: tenant, AfterNamespace: after.Namespace, AfterJob: after.Job, AfterPrincipal: after.Principal,
		PageSize: int32(size + 1)}
	if f.Namespace != "" {
		p.Namespace = &f.Namespace
	}
	if f.Principal != "" {
		if err := lookupPrincipal(f.Principal); err != nil {
			return nil, "", err
		}
		p.Principal = &f.Principal
	}
	rows, err := store.New(k.pool).ListGrants(ctx, p)
	if err != nil {
		return nil, "", err
	}
	rows, next := store.NextPage(rows, size, func(r store.ListGrantsRow) any {
		return grantToken{Namespace: r.Namespace, Job: r.JobName, Principal: r.Principal}
	})
	out := make([]Grant, len(rows))
	for i, r := range rows {
		out[i] = Grant{ID: r.ID, Principal: r.Principal, Namespace: r.Namespace, Job: r.JobName, Role: Role(r.Role),
			CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy}
	}
	return out, next, nil
}

// forgetPrincipal drops the cached keys of a principal (its grants
// changed here).
func (k *Service) forgetPrincipal(tenant uuid.UUID, name string) {
	k.forgetWhere(func(p Principal) bool { return p.Tenant == tenant && p.Name == name })
}

func pageSize(n int) (int, error) {
	switch {
	case n < 0 || n > MaxPageSize:
		return 0, &dag.FieldError{Field: "page_size", Message: fmt.Sprintf("%d: want 0 to %d", n, MaxPageSize)}
	case n == 0:
		return DefaultPageSize, nil
	}
	return n, nil
}

func decodeToken(token string, v any) error {
	if token == "" {
		return nil
	}
	if store.DecodePageToken(token, v) != nil {
		return &dag.FieldError{Field: "page_token", Message: "not a token this list returned"}
	}
	return nil
}
