package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/engine/access"
	"github.com/orrery-dev/orrery/engine/job"
)

// Authenticator turns a request's credentials into the principal it acts
// as. KeyAuth verifies API keys; an OIDC/JWT verifier can implement it
// too. It returns access.ErrUnauthenticated for missing or bad
// credentials.
type Authenticator interface {
	Authenticate(ctx context.Context, h http.Header) (access.Principal, error)
}

// KeyAuth authenticates `Authorization: Bearer <API key>`.
type KeyAuth struct{ Keys *access.Keys }

// Authenticate implements Authenticator.
func (a KeyAuth) Authenticate(ctx context.Context, h http.Header) (access.Principal, error) {
	v := h.Get("Authorization")
	token, ok := strings.CutPrefix(v, "Bearer ")
	if !ok {
		return access.Principal{}, access.ErrUnauthenticated
	}
	return a.Keys.Verify(ctx, strings.TrimSpace(token))
}

// refuseAll is the Authenticator of a handler given none: nothing is
// served without one being chosen.
type refuseAll struct{}

func (refuseAll) Authenticate(context.Context, http.Header) (access.Principal, error) {
	return access.Principal{}, access.ErrUnauthenticated
}

// NoAuth lets every call act as an anonymous admin of the default tenant:
// `--auth none`, for experiments only.
type NoAuth struct{}

// Authenticate implements Authenticator.
func (NoAuth) Authenticate(context.Context, http.Header) (access.Principal, error) {
	return access.Principal{Tenant: job.DefaultTenant, TenantName: "default", Name: "anonymous", Role: access.Admin}, nil
}

// required is the role each procedure needs. It is the one place that
// decides what a call may do; handlers never check. A procedure missing
// here needs admin.
var required = map[string]access.Role{
	orreryv1connect.JobServiceGetJobProcedure:            access.Reader,
	orreryv1connect.JobServiceListJobsProcedure:          access.Reader,
	orreryv1connect.JobServicePreviewScheduleProcedure:   access.Reader,
	orreryv1connect.RunServiceListRunsProcedure:          access.Reader,
	orreryv1connect.RunServiceGetRunProcedure:            access.Reader,
	orreryv1connect.RunServiceListDeadLettersProcedure:   access.Reader,
	orreryv1connect.ClusterServiceGetClusterProcedure:    access.Reader,
	orreryv1connect.PipelineServicePlanProcedure:         access.Reader,
	orreryv1connect.JobServiceCreateJobProcedure:         access.Editor,
	orreryv1connect.JobServiceUpdateJobProcedure:         access.Editor,
	orreryv1connect.JobServiceDeleteJobProcedure:         access.Editor,
	orreryv1connect.JobServicePauseJobProcedure:          access.Editor,
	orreryv1connect.JobServiceResumeJobProcedure:         access.Editor,
	orreryv1connect.RunServiceTriggerJobProcedure:        access.Editor,
	orreryv1connect.RunServiceCancelRunProcedure:         access.Editor,
	orreryv1connect.PipelineServiceApplyProcedure:        access.Editor,
	orreryv1connect.RunServiceReplayDeadLettersProcedure: access.Admin,
	// Key management is admin's, explicitly (not by the default for an
	// unlisted procedure): a key that can make keys can make any role up to
	// its own, and CreateAPIKey refuses a role above the caller's.
	orreryv1connect.AccessServiceCreateAPIKeyProcedure: access.Admin,
	orreryv1connect.AccessServiceListAPIKeysProcedure:  access.Admin,
	orreryv1connect.AccessServiceRevokeAPIKeyProcedure: access.Admin,
}

// RequiredRole is the role a procedure needs (admin when not listed).
func RequiredRole(procedure string) access.Role {
	if r, ok := required[procedure]; ok {
		return r
	}
	return access.Admin
}

type principalKey struct{}

// principalOf is the principal the interceptor put in ctx. A context
// without one (a handler called outside the interceptor) acts as nobody:
// a tenant that does not exist, so it sees and changes nothing.
func principalOf(ctx context.Context) access.Principal {
	if p, ok := ctx.Value(principalKey{}).(access.Principal); ok {
		return p
	}
	return access.Principal{Name: "nobody"}
}

// authorize authenticates every call and checks its procedure's role
// before the handler runs.
func authorize(auth Authenticator) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			p, err := auth.Authenticate(ctx, req.Header())
			if errors.Is(err, access.ErrUnauthenticated) {
				return nil, connect.NewError(connect.CodeUnauthenticated, err)
			}
			if err != nil {
				return nil, toConnect(ctx, nil, err) // the database: Unavailable when it is down
			}
			if need := RequiredRole(req.Spec().Procedure); !p.Role.Allows(need) {
				return nil, connect.NewError(connect.CodePermissionDenied,
					errors.New("this key's role ("+string(p.Role)+") cannot do this; it needs "+string(need)))
			}
			return next(context.WithValue(ctx, principalKey{}, p), req)
		}
	}
}
