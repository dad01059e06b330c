package api

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/access"
)

// profileServer implements orrery.v1.ProfileService: the caller's
// tenant's resource profiles (docs/resources.md).
type profileServer struct {
	orreryv1connect.UnimplementedProfileServiceHandler
	access *access.Service
	log    *slog.Logger
}

func (s *profileServer) SetProfile(ctx context.Context, req *connect.Request[orreryv1.SetProfileRequest]) (*connect.Response[orreryv1.SetProfileResponse], error) {
	m := req.Msg
	if m.GetResources() == nil {
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "resources", Message: "required: at least one of cpu, memory, gpu, custom"})
	}
	spec := resourcesFromProto(m.GetResources()).Spec()
	p, err := s.access.SetProfile(ctx, principalOf(ctx), m.GetName(), spec)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.SetProfileResponse{Profile: profileToProto(p)}), nil
}

func (s *profileServer) GetProfile(ctx context.Context, req *connect.Request[orreryv1.GetProfileRequest]) (*connect.Response[orreryv1.GetProfileResponse], error) {
	if err := dag.ValidateName(req.Msg.GetName()); err != nil {
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "name", Message: err.Error()})
	}
	p, err := s.access.GetProfile(ctx, principalOf(ctx).Tenant, req.Msg.GetName())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.GetProfileResponse{Profile: profileToProto(p)}), nil
}

func (s *profileServer) ListProfiles(ctx context.Context, _ *connect.Request[orreryv1.ListProfilesRequest]) (*connect.Response[orreryv1.ListProfilesResponse], error) {
	ps, err := s.access.ListProfiles(ctx, principalOf(ctx).Tenant)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ListProfilesResponse{Profiles: make([]*orreryv1.ResourceProfile, len(ps))}
	for i, p := range ps {
		out.Profiles[i] = profileToProto(p)
	}
	return connect.NewResponse(out), nil
}

func (s *profileServer) DeleteProfile(ctx context.Context, req *connect.Request[orreryv1.DeleteProfileRequest]) (*connect.Response[orreryv1.DeleteProfileResponse], error) {
	if err := dag.ValidateName(req.Msg.GetName()); err != nil {
		return nil, toConnect(ctx, s.log, &dag.FieldError{Field: "name", Message: err.Error()})
	}
	p, err := s.access.DeleteProfile(ctx, principalOf(ctx), req.Msg.GetName())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.DeleteProfileResponse{Profile: profileToProto(p)}), nil
}

func profileToProto(p access.Profile) *orreryv1.ResourceProfile {
	return &orreryv1.ResourceProfile{Name: p.Name, Resources: vectorToProto(p.Resources),
		CreateTime: timestamppb.New(p.CreateTime), UpdateTime: timestamppb.New(p.UpdateTime)}
}

// resourceFieldError names a resource's mistake below field (capacity.cpu).
func resourceFieldError(field string, err error) error {
	var fe *resources.FieldError
	if errors.As(err, &fe) {
		return &dag.FieldError{Field: field + "." + fe.Field, Message: fe.Message}
	}
	return &dag.FieldError{Field: field, Message: err.Error()}
}
