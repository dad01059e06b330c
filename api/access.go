package api

import (
	"context"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/job"
)

// accessServer implements orrery.v1.AccessService: tenants, the API keys
// of the caller's tenant and its grants. The interceptor decides who may
// call what (policies); every call acts in the caller's tenant, but for
// the tenant a system admin names when it makes a key.
type accessServer struct {
	orreryv1connect.UnimplementedAccessServiceHandler
	access *access.Service
	jobs   *job.Service
	log    *slog.Logger
}

func (s *accessServer) CreateTenant(ctx context.Context, req *connect.Request[orreryv1.CreateTenantRequest]) (*connect.Response[orreryv1.CreateTenantResponse], error) {
	t, err := s.access.CreateTenant(ctx, principalOf(ctx), req.Msg.GetName())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.CreateTenantResponse{Tenant: tenantToProto(t)}), nil
}

func (s *accessServer) ListTenants(ctx context.Context, req *connect.Request[orreryv1.ListTenantsRequest]) (*connect.Response[orreryv1.ListTenantsResponse], error) {
	ts, next, err := s.access.ListTenants(ctx, int(req.Msg.GetPageSize()), req.Msg.GetPageToken())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ListTenantsResponse{NextPageToken: next, Tenants: make([]*orreryv1.Tenant, len(ts))}
	for i, t := range ts {
		out.Tenants[i] = tenantToProto(t)
	}
	return connect.NewResponse(out), nil
}

func (s *accessServer) SetTenantQuota(ctx context.Context, req *connect.Request[orreryv1.SetTenantQuotaRequest]) (*connect.Response[orreryv1.SetTenantQuotaResponse], error) {
	m := req.Msg
	c := access.QuotaChange{MaxConcurrency: m.MaxConcurrency, Weight: m.Weight, Queues: m.GetQueues(),
		MaxJobs: m.MaxJobs, MaxDefinitionBytes: m.MaxDefinitionBytes, MaxRuns: m.MaxRuns, MaxTasks: m.MaxTasks, MaxHistoryBytes: m.MaxHistoryBytes, MaxItemsPerStep: m.MaxItemsPerStep, MaxRunsPerTree: m.MaxRunsPerTree}
	if r := m.GetMaxResources(); r != nil {
		spec := resourcesFromProto(r).Spec()
		c.MaxResources = &spec
	}
	q, err := s.access.SetQuota(ctx, principalOf(ctx), m.GetTenant(), c)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.SetTenantQuotaResponse{Quota: quotaToProto(q)}
	if c.MaxResources != nil && s.jobs != nil {
		// Set: the live jobs it leaves a step of waiting for ever.
		if out.OverQuota, out.OverQuotaTruncated, err = s.jobs.OverQuota(ctx, q.Tenant.ID, q.Tenant.ResourceQuota()); err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
	}
	return connect.NewResponse(out), nil
}

func (s *accessServer) GetTenantQuota(ctx context.Context, req *connect.Request[orreryv1.GetTenantQuotaRequest]) (*connect.Response[orreryv1.GetTenantQuotaResponse], error) {
	tenant := req.Msg.GetTenant()
	if tenant == "" { // the caller's own (the policy asked for an admin of it)
		tenant = principalOf(ctx).TenantName
	}
	q, err := s.access.GetQuota(ctx, tenant)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.GetTenantQuotaResponse{Quota: quotaToProto(q)}), nil
}

func quotaToProto(q access.Quota) *orreryv1.TenantQuota {
	return &orreryv1.TenantQuota{Tenant: q.Tenant.Name, MaxConcurrency: q.Tenant.MaxConcurrency, Weight: q.Tenant.Weight, Queues: q.Queues,
		MaxJobs: q.Storage.Jobs, MaxDefinitionBytes: q.Storage.DefinitionBytes, MaxRuns: q.Storage.Runs, MaxTasks: q.Storage.Tasks,
		MaxItemsPerStep: q.Tenant.MaxItemsPerStep, MaxRunsPerTree: q.Tenant.MaxRunsPerTree, MaxHistoryBytes: q.Storage.HistoryBytes,
		MaxResources: maxResourcesToProto(q.Tenant.ResourceQuota()),
		Usage: &orreryv1.TenantUsage{Jobs: q.Usage.Jobs, DefinitionBytes: q.Usage.DefinitionBytes, Runs: q.Usage.Runs, Tasks: q.Usage.Tasks,
			HistoryBytes: q.Usage.HistoryBytes}}
}

func (s *accessServer) CreateAPIKey(ctx context.Context, req *connect.Request[orreryv1.CreateAPIKeyRequest]) (*connect.Response[orreryv1.CreateAPIKeyResponse], error) {
	p, m := principalOf(ctx), req.Msg
	role, err := access.ParseKeyRole(m.GetRole())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	var ttl time.Duration
	if d := m.GetExpiresIn(); d != nil {
		if err := d.CheckValid(); err != nil {
			return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "expires_in", Message: "not a valid duration: " + err.Error()})
		}
		ttl = d.AsDuration()
	}
	tenant := m.GetTenant()
	if tenant == "" {
		tenant = p.TenantName
	}
	secret, key, err := s.access.Create(ctx, access.NewKey{Tenant: tenant, Principal: m.GetPrincipal(), Role: role,
		SystemAdmin: m.GetSystemAdmin(), TTL: ttl, CreatedBy: p.Actor().Name,
		WorkerTypes: m.GetWorkerTypes(), WorkerNamespaces: m.GetWorkerNamespaces()})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.CreateAPIKeyResponse{Secret: secret, Key: keyToProto(key)}), nil
}

func (s *accessServer) ListAPIKeys(ctx context.Context, _ *connect.Request[orreryv1.ListAPIKeysRequest]) (*connect.Response[orreryv1.ListAPIKeysResponse], error) {
	keys, err := s.access.List(ctx, principalOf(ctx).Tenant)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ListAPIKeysResponse{Keys: make([]*orreryv1.APIKey, len(keys))}
	for i, k := range keys {
		out.Keys[i] = keyToProto(k)
	}
	return connect.NewResponse(out), nil
}

func (s *accessServer) RevokeAPIKey(ctx context.Context, req *connect.Request[orreryv1.RevokeAPIKeyRequest]) (*connect.Response[orreryv1.RevokeAPIKeyResponse], error) {
	prefix := req.Msg.GetPrefix()
	if prefix == "" {
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "prefix", Message: "required: the key's prefix (ork_...), as ListAPIKeys shows it"})
	}
	if err := s.access.Revoke(ctx, principalOf(ctx), prefix); err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.RevokeAPIKeyResponse{}), nil
}

func (s *accessServer) GrantRole(ctx context.Context, req *connect.Request[orreryv1.GrantRoleRequest]) (*connect.Response[orreryv1.GrantRoleResponse], error) {
	m := req.Msg
	g, err := s.access.GrantRole(ctx, principalOf(ctx), access.Grant{Principal: m.GetPrincipal(), Namespace: m.GetNamespace(),
		Job: m.GetJob(), Role: access.Role(m.GetRole())})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.GrantRoleResponse{Grant: grantToProto(g)}), nil
}

func (s *accessServer) RevokeGrant(ctx context.Context, req *connect.Request[orreryv1.RevokeGrantRequest]) (*connect.Response[orreryv1.RevokeGrantResponse], error) {
	m := req.Msg
	err := s.access.RevokeGrant(ctx, principalOf(ctx), access.Grant{Principal: m.GetPrincipal(), Namespace: m.GetNamespace(), Job: m.GetJob()})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.RevokeGrantResponse{}), nil
}

func (s *accessServer) ListGrants(ctx context.Context, req *connect.Request[orreryv1.ListGrantsRequest]) (*connect.Response[orreryv1.ListGrantsResponse], error) {
	m := req.Msg
	gs, next, err := s.access.ListGrants(ctx, principalOf(ctx).Tenant, access.GrantFilter{Namespace: m.GetNamespace(),
		Principal: m.GetPrincipal(), PageSize: int(m.GetPageSize()), PageToken: m.GetPageToken()})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ListGrantsResponse{NextPageToken: next, Grants: make([]*orreryv1.Grant, len(gs))}
	for i, g := range gs {
		out.Grants[i] = grantToProto(g)
	}
	return connect.NewResponse(out), nil
}

func (s *accessServer) WhoAmI(ctx context.Context, _ *connect.Request[orreryv1.WhoAmIRequest]) (*connect.Response[orreryv1.WhoAmIResponse], error) {
	p := principalOf(ctx)
	out := &orreryv1.WhoAmIResponse{Tenant: p.TenantName, Principal: p.Name, Role: string(p.Role), SystemAdmin: p.SystemAdmin, KeyPrefix: p.KeyPrefix}
	for _, g := range p.Grants {
		out.Grants = append(out.Grants, &orreryv1.Grant{Principal: g.Principal, Namespace: g.Namespace, Job: g.Job, Role: string(g.Role)})
	}
	return connect.NewResponse(out), nil
}

func keyToProto(k access.Key) *orreryv1.APIKey {
	out := &orreryv1.APIKey{Id: k.ID.String(), Prefix: k.Prefix, Principal: k.Principal, Role: string(k.Role),
		SystemAdmin: k.SystemAdmin, CreatedBy: k.CreatedBy, WorkerTypes: k.WorkerTypes, WorkerNamespaces: k.WorkerNamespaces}
	if !k.CreatedAt.IsZero() {
		out.CreatedAt = timestamppb.New(k.CreatedAt)
	}
	if k.ExpiresAt != nil {
		out.ExpiresAt = timestamppb.New(*k.ExpiresAt)
	}
	if k.RevokedAt != nil {
		out.RevokedAt = timestamppb.New(*k.RevokedAt)
	}
	return out
}

func grantToProto(g access.Grant) *orreryv1.Grant {
	return &orreryv1.Grant{Id: g.ID.String(), Principal: g.Principal, Namespace: g.Namespace, Job: g.Job, Role: string(g.Role),
		CreatedAt: timestamppb.New(g.CreatedAt), CreatedBy: g.CreatedBy}
}

func tenantToProto(t access.Tenant) *orreryv1.Tenant {
	return &orreryv1.Tenant{Id: t.ID.String(), Name: t.Name, Weight: t.Weight, MaxConcurrency: t.MaxConcurrency,
		CreatedAt: timestamppb.New(t.CreatedAt)}
}

func maxResourcesToProto(v resources.Vector) *orreryv1.Resources {
	if v.IsZero() {
		return nil
	}
	return vectorToProto(v)
}
