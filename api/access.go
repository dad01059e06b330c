package api

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/engine/access"
)

// accessServer implements orrery.v1.AccessService: the API keys of the
// caller's tenant. The interceptor lets only admins in (see required);
// every call acts in the caller's tenant.
type accessServer struct {
	orreryv1connect.UnimplementedAccessServiceHandler
	keys *access.Keys
	log  *slog.Logger
}

func (s *accessServer) CreateAPIKey(ctx context.Context, req *connect.Request[orreryv1.CreateAPIKeyRequest]) (*connect.Response[orreryv1.CreateAPIKeyResponse], error) {
	p := principalOf(ctx)
	role, err := access.ParseRole(req.Msg.GetRole())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	if !p.Role.Allows(role) {
		return nil, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("role: this key's role (%s) cannot create a key with the role %s", p.Role, role))
	}
	var ttl time.Duration
	if d := req.Msg.GetExpiresIn(); d != nil {
		if err := d.CheckValid(); err != nil {
			return nil, toConnect(ctx, s.log, &access.InvalidError{Field: "expires_in", Message: "not a valid duration: " + err.Error()})
		}
		ttl = d.AsDuration()
	}
	secret, key, err := s.keys.Create(ctx, p.TenantName, req.Msg.GetPrincipal(), role, ttl, p.Actor().Name, false)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.CreateAPIKeyResponse{Secret: secret, Key: keyToProto(key)}), nil
}

func (s *accessServer) ListAPIKeys(ctx context.Context, _ *connect.Request[orreryv1.ListAPIKeysRequest]) (*connect.Response[orreryv1.ListAPIKeysResponse], error) {
	keys, err := s.keys.List(ctx, principalOf(ctx).Tenant)
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
		return nil, toConnect(ctx, s.log, &access.InvalidError{Field: "prefix", Message: "required: the key's prefix (ork_...), as ListAPIKeys shows it"})
	}
	if err := s.keys.Revoke(ctx, principalOf(ctx), prefix); err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.RevokeAPIKeyResponse{}), nil
}

func keyToProto(k access.Key) *orreryv1.APIKey {
	out := &orreryv1.APIKey{Id: k.ID.String(), Prefix: k.Prefix, Principal: k.Principal, Role: string(k.Role), CreatedBy: k.CreatedBy}
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
