package access

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/store"
)

// MaxSources bounds a tenant's event sources.
const MaxSources = 100

// Kinds of event source: how a delivery is signed and where its event's
// type and id are (internal/event, hook.go).
var SourceKinds = []string{"github", "stripe", "hmac"}

// Source is a tenant's signed webhook (docs/events.md): deliveries to
// /api/v1/hooks/TENANT:NAME become events of the tenant once their
// signature verifies with the secret Secret refers to.
type Source struct {
	ID       uuid.UUID
	TenantID uuid.UUID
	Tenant   string // its tenant's name
	Name     string
	// Namespace is whose secret grants (--secret-env, --secret-dir of the
	// API process) resolve Secret.
	Namespace  string
	Kind       string
	Secret     string // a reference: secret://env/NAME or secret://file/PATH
	CreateTime time.Time
}

// HookPath is where the source takes deliveries.
func (s Source) HookPath() string { return "/api/v1/hooks/" + s.Tenant + ":" + s.Name }

func sourceOfRow(r store.EventSource, tenant string) Source {
	return Source{ID: r.ID, TenantID: r.TenantID, Tenant: tenant, Name: r.Name, Namespace: r.Namespace, Kind: r.Kind, Secret: r.Secret, CreateTime: r.CreatedAt}
}

func sourceJSON(s Source) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"name": s.Name, "namespace": s.Namespace, "kind": s.Kind, "secret": s.Secret})
	return b
}

// CreateSource defines an event source of by's tenant, audited
// (create_source). The name must be free in the tenant (ErrExists
// otherwise); the secret must be a reference, never a value. The caller's
// authority (an admin of the tenant) is the API's to check.
func (k *Service) CreateSource(ctx context.Context, by Principal, s Source) (Source, error) {
	if err := dag.ValidateName(s.Name); err != nil {
		return Source{}, &dag.FieldError{Field: "name", Message: err.Error()}
	}
	if s.Namespace == "" {
		s.Namespace = "default"
	}
	if err := dag.ValidateName(s.Namespace); err != nil {
		return Source{}, &dag.FieldError{Field: "namespace", Message: err.Error()}
	}
	known := false
	for _, kind := range SourceKinds {
		known = known || s.Kind == kind
	}
	if !known {
		return Source{}, &dag.FieldError{Field: "kind", Message: fmt.Sprintf("%q is not a kind of source: %s", s.Kind, strings.Join(SourceKinds, ", "))}
	}
	if !dag.IsSecretRef(s.Secret) {
		// The value itself is never echoed: it may be the secret.
		return Source{}, &dag.FieldError{Field: "secret", Message: "is not a secret reference: secret://env/NAME or secret://file/PATH (the secret's value is never stored)"}
	}
	var out Source
	err := store.InTx(ctx, k.pool, func(q *store.Queries) error {
		n, err := q.CountSources(ctx, by.Tenant)
		if err != nil {
			return err
		}
		if n >= MaxSources {
			return &dag.FieldError{Field: "name", Message: fmt.Sprintf("the tenant has %d sources, the most it may (delete one first)", n)}
		}
		row, err := q.InsertSource(ctx, store.InsertSourceParams{ID: uuid.Must(uuid.NewV7()), TenantID: by.Tenant, Name: s.Name,
			Namespace: s.Namespace, Kind: s.Kind, Secret: s.Secret})
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: source %q (delete it first, or choose another name)", ErrExists, s.Name)
		}
		if err != nil {
			return err
		}
		out = sourceOfRow(row, by.TenantName)
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: by.Tenant, Actor: by.Actor().Name,
			Action: "create_source", TargetKind: "source", TargetID: out.ID, TargetName: out.Name, After: sourceJSON(out)})
	})
	return out, err
}

// ListSources lists a tenant's sources by name.
func (k *Service) ListSources(ctx context.Context, p Principal) ([]Source, error) {
	rows, err := store.New(k.pool).ListSources(ctx, p.Tenant)
	if err != nil {
		return nil, err
	}
	out := make([]Source, len(rows))
	for i, r := range rows {
		out[i] = sourceOfRow(r, p.TenantName)
	}
	return out, nil
}

// DeleteSource deletes a source of by's tenant, audited (delete_source):
// its deliveries are refused from then on. Its events stay, under its
// name: a source made again with the name takes none of their ids again.
func (k *Service) DeleteSource(ctx context.Context, by Principal, name string) (Source, error) {
	if err := dag.ValidateName(name); err != nil {
		return Source{}, &dag.FieldError{Field: "name", Message: err.Error()}
	}
	var out Source
	err := store.InTx(ctx, k.pool, func(q *store.Queries) error {
		row, err := q.DeleteSource(ctx, store.DeleteSourceParams{TenantID: by.Tenant, Name: name})
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: no source %q", ErrNotFound, name)
		}
		if err != nil {
			return err
		}
		out = sourceOfRow(row, by.TenantName)
		return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: by.Tenant, Actor: by.Actor().Name,
			Action: "delete_source", TargetKind: "source", TargetID: out.ID, TargetName: out.Name, Before: sourceJSON(out)})
	})
	return out, err
}

// HookSource reads the source a delivery names (its path's
// TENANT:NAME), guarded as a key is: the client's address (WithSource)
// must have a failure left, and a name that names no source costs it one
// (as does a delivery whose signature then fails: FailedDelivery). Every
// refusal is ErrUnauthenticated, whether the source exists or not.
func (k *Service) HookSource(ctx context.Context, tenant, name string) (Source, error) {
	if dag.ValidateName(tenant) != nil || dag.ValidateName(name) != nil {
		k.throttle.fail(sourceOf(ctx), time.Now())
		return Source{}, ErrUnauthenticated
	}
	client := sourceOf(ctx)
	if err := k.throttle.take(client, time.Now()); err != nil {
		return Source{}, err
	}
	row, err := store.New(k.pool).HookSource(ctx, store.HookSourceParams{TenantName: tenant, Name: name})
	if store.IsNotFound(err) {
		return Source{}, ErrUnauthenticated
	}
	if err != nil {
		return Source{}, err
	}
	k.throttle.refund(client, time.Now())
	return Source{ID: row.ID, TenantID: row.TenantID, Tenant: row.TenantName, Name: row.Name, Namespace: row.Namespace, Kind: row.Kind, Secret: row.Secret, CreateTime: row.CreatedAt}, nil
}

// FailedDelivery charges a delivery whose signature did not verify to its
// client's address.
func (k *Service) FailedDelivery(ctx context.Context) {
	k.throttle.fail(sourceOf(ctx), time.Now())
}
