package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/job"
)

// Authenticator turns a request's credentials into the principal it acts
// as. KeyAuth verifies API keys; an OIDC/JWT verifier can implement it
// too. It returns access.ErrUnauthenticated for missing or bad
// credentials.
type Authenticator interface {
	Authenticate(ctx context.Context, h http.Header) (access.Principal, error)
}

// KeyAuth authenticates `Authorization: Bearer <API key>`.
type KeyAuth struct{ Access *access.Service }

// Authenticate implements Authenticator.
func (a KeyAuth) Authenticate(ctx context.Context, h http.Header) (access.Principal, error) {
	v := h.Get("Authorization")
	token, ok := strings.CutPrefix(v, "Bearer ")
	if !ok {
		return access.Principal{}, access.ErrUnauthenticated
	}
	return a.Access.Verify(ctx, strings.TrimSpace(token))
}

// refuseAll is the Authenticator of a handler given none: nothing is
// served without one being chosen.
type refuseAll struct{}

func (refuseAll) Authenticate(context.Context, http.Header) (access.Principal, error) {
	return access.Principal{}, access.ErrUnauthenticated
}

// NoAuth lets every call act as an anonymous admin of the default tenant,
// and as a worker of any type there: `--auth none`, for experiments only.
// It is not a system admin: keys made while authentication is off outlive
// it, and should not reach other tenants.
type NoAuth struct{}

// Authenticate implements Authenticator.
func (NoAuth) Authenticate(context.Context, http.Header) (access.Principal, error) {
	return access.Principal{Tenant: job.DefaultTenant, TenantName: "default", Name: "anonymous", Role: access.Admin,
		Worker: &access.WorkerScope{Types: []string{"*"}}}, nil
}

type principalKey struct{}

// authenticatedKey carries the principal preauthenticate found for a
// request from the network, before its body was read.
type authenticatedKey struct{}

// preauthenticate authenticates every call of Orrery's services from its
// headers before its body is read or decoded: a request without a good
// credential costs no decoding (health and reflection stay open). The
// interceptor then authorizes the principal found.
func preauthenticate(auth Authenticator, next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, inProcess := r.Context().Value(inProcessKey{}).(access.Principal)
		rest := strings.HasPrefix(r.URL.Path, RESTPrefix)
		// A delivery to an event source is authenticated by its signature
		// (hookHandler), not a key.
		hook := strings.HasPrefix(r.URL.Path, HookPrefix)
		if inProcess || hook || !rest && !strings.HasPrefix(r.URL.Path, "/orrery.v1.") {
			next.ServeHTTP(w, r)
			return
		}
		p, err := auth.Authenticate(r.Context(), r.Header)
		if err != nil {
			var ce *connect.Error
			if errors.Is(err, access.ErrUnauthenticated) {
				ce = connect.NewError(connect.CodeUnauthenticated, err)
			} else {
				ce = toConnect(r.Context(), nil, err).(*connect.Error)
			}
			if rest {
				writeRESTError(w, ce)
			} else {
				_ = errs.Write(w, r, ce)
			}
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authenticatedKey{}, p)))
	})
}

// clientSource is the source a client's failures are charged to: its IPv4
// address, or the /64 of its IPv6 address (what one host is given).
func clientSource(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if ip = ip.Unmap(); ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// WithClientSource records each request's client address (the peer's IP;
// a proxy in front is one client) in its context, where failed
// authentications are charged to it (access.WithSource).
func WithClientSource(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(access.WithSource(r.Context(), clientSource(r.RemoteAddr))))
	})
}

type inProcessKey struct{}

// WithPrincipal makes the calls made with ctx act as p without a
// credential: for a caller in this process that authenticated p itself
// (the web UI's sessions) and calls the API handler in-process. The policy
// still decides every call. A request from the network cannot carry it.
func WithPrincipal(ctx context.Context, p access.Principal) context.Context {
	return context.WithValue(ctx, inProcessKey{}, p)
}

// principalOf is the principal the interceptor put in ctx. A context
// without one (a handler called outside the interceptor) acts as nobody:
// a tenant that does not exist, so it sees and changes nothing.
func principalOf(ctx context.Context) access.Principal {
	if p, ok := ctx.Value(principalKey{}).(access.Principal); ok {
		return p
	}
	return access.Principal{Name: "nobody", Role: access.None}
}

// authorize authenticates every call and checks, before the handler runs,
// that its principal holds the role its procedure needs on everything the
// request names (policies).
func authorize(auth Authenticator, loc locator) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			p, ok := ctx.Value(inProcessKey{}).(access.Principal)
			if !ok {
				p, ok = ctx.Value(authenticatedKey{}).(access.Principal)
			}
			if !ok {
				var err error
				p, err = auth.Authenticate(ctx, req.Header())
				if errors.Is(err, access.ErrUnauthenticated) {
					return nil, connect.NewError(connect.CodeUnauthenticated, err)
				}
				if err != nil {
					return nil, toConnect(ctx, nil, err) // the database: Unavailable when it is down
				}
			}
			if err := policyOf(req.Spec().Procedure).check(ctx, loc, p, req.Any()); err != nil {
				return nil, err
			}
			return next(context.WithValue(ctx, principalKey{}, p), req)
		}
	}
}

// MetricsHandler guards the Prometheus metrics served on the API's
// address: they show every tenant's namespaces and queues, so only a
// system admin key may read them (Prometheus sends it as a bearer token:
// `authorization: {credentials: ork_...}` in its scrape config), or anyone
// when authentication is off. `--metrics-addr` serves them without a key
// on a listener of the operator's choosing.
func MetricsHandler(auth Authenticator, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, off := auth.(NoAuth); !off {
			p, err := auth.Authenticate(r.Context(), r.Header)
			var throttled *access.ThrottledError
			switch {
			case errors.Is(err, access.ErrUnauthenticated):
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			case errors.As(err, &throttled):
				w.Header().Set("Retry-After", strconv.Itoa(int(throttled.RetryAfter.Seconds())+1))
				http.Error(w, err.Error(), http.StatusTooManyRequests)
				return
			case err != nil:
				http.Error(w, "the database is unavailable", http.StatusServiceUnavailable)
				return
			case !p.SystemAdmin:
				http.Error(w, "metrics need a system admin key", http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
