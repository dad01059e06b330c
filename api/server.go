package api

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"connectrpc.com/otelconnect"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/engine/executor"

	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/gateway"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/run"
)

// Services are what the API serves.
type Services struct {
	Jobs *job.Service
	Runs *run.Service
	// State is the state database, for the cluster view.
	State *pgxpool.Pool
	// Queues are River's databases, for the cluster view's queue depths
	// (no Default: none shown).
	Queues dispatch.QueueDBs
	// Limits bound what one request may cost; zero fields take defaults.
	Limits Limits
	// Auth authenticates every call (KeyAuth; NoAuth only for
	// experiments). Nil refuses every call.
	Auth Authenticator
	// Gateway serves WorkerService (remote workers); nil: not served here.
	Gateway *gateway.Gateway
	// Secrets resolves the secrets of event sources (their deliveries'
	// signatures) per tenant and namespace: the process's --secret-env and
	// --secret-dir grants. Nil: no source's delivery verifies here.
	Secrets *executor.SecretPolicy
}

// Limits bound every request before any work is done for it.
type Limits struct {
	// MaxRequestBytes caps a request body as sent (compressed or not) and
	// each message after decompression, so a small gzip bomb cannot
	// expand in memory. Over it: ResourceExhausted. Default 4 MiB.
	MaxRequestBytes int64
}

// DefaultMaxRequestBytes is Limits.MaxRequestBytes when unset.
const DefaultMaxRequestBytes = 4 << 20

func (l Limits) withDefaults() Limits {
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = DefaultMaxRequestBytes
	}
	return l
}

// NewHandler returns the HTTP handler for every service, with gRPC
// reflection (v1 and v1alpha) and the gRPC health service.
func NewHandler(svc Services, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	limits := svc.Limits.withDefaults()
	auth := svc.Auth
	if auth == nil {
		auth = refuseAll{}
	}
	// AccessService and the interceptor share KeyAuth's access.Service, so
	// that a key revoked or a grant changed here leaves this server's cache
	// at once.
	acc := access.New(svc.State)
	if ka, ok := auth.(KeyAuth); ok {
		acc = ka.Access
	}
	// Traces of every call (otelconnect), when the process set up a tracer
	// provider (package tracing); a no-op otherwise.
	otelInterceptor, err := otelconnect.NewInterceptor()
	if err != nil {
		panic(err) // only a bad option could fail it, and none is given
	}
	opts := []connect.HandlerOption{
		// refuseNUL runs before authorize on purpose: it reads only the
		// request, so its 422 tells a caller without the role nothing of
		// the tenant's data, and no handler or check sees a NUL.
		connect.WithInterceptors(otelInterceptor, boundErrors(), jsonFieldNames(), refuseNUL(), authorize(auth, acc), logErrors(log)),
		// A panic in a handler is an Internal error for that call, logged,
		// not a dropped connection.
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			log.ErrorContext(ctx, "handler panicked", "procedure", spec.Procedure, "panic", p)
			return connect.NewError(connect.CodeInternal, errors.New("internal error; see the server log"))
		}),
		connect.WithReadMaxBytes(int(limits.MaxRequestBytes)),
		// Compressing small answers costs more CPU than the bytes it saves on
		// the networks this runs on; larger ones (list pages) still compress.
		connect.WithCompressMinBytes(4 << 10),
	}
	opts = append(opts, strictJSONCodecs()...)
	mux := http.NewServeMux()
	var services []service
	add := func(path string, h http.Handler) {
		mux.Handle(path, h)
		services = append(services, service{path, h})
	}
	add(orreryv1connect.NewJobServiceHandler(&jobServer{jobs: svc.Jobs, runs: svc.Runs, log: log}, opts...))
	add(orreryv1connect.NewRunServiceHandler(&runServer{runs: svc.Runs, log: log}, opts...))
	add(orreryv1connect.NewClusterServiceHandler(&clusterServer{pool: svc.State, queues: svc.Queues, log: log}, opts...))
	add(orreryv1connect.NewPipelineServiceHandler(&pipelineServer{jobs: svc.Jobs, log: log}, opts...))
	add(orreryv1connect.NewAuditServiceHandler(&auditServer{pool: svc.State, log: log}, opts...))
	add(orreryv1connect.NewAccessServiceHandler(&accessServer{access: acc, jobs: svc.Jobs, log: log}, opts...))
	add(orreryv1connect.NewAlertServiceHandler(&alertServer{pool: svc.State, jobs: svc.Jobs, log: log}, opts...))
	add(orreryv1connect.NewProfileServiceHandler(&profileServer{access: acc, log: log}, opts...))
	add(orreryv1connect.NewSourceServiceHandler(&sourceServer{access: acc, log: log}, opts...))
	// Deliveries to event sources carry no API key: their signature, which
	// the handler verifies, stands for one (preauthenticate passes them).
	mux.Handle("POST "+HookPrefix+"{source}", &hookHandler{access: acc, pool: svc.State, shards: shardsOf(svc.Jobs), secrets: svc.Secrets,
		rate: newKeyRate(deliveriesPerSecond, "deliveries", "to this source"), log: log})
	add(orreryv1connect.NewEventServiceHandler(&eventServer{pool: svc.State, shards: shardsOf(svc.Jobs), log: log, rate: newKeyRate(publishesPerSecond, "events", "with this key")}, opts...))
	// REST: the same handlers behind vanguard (the workers' service has no
	// REST paths: workers speak Connect or gRPC).
	rest, err := newREST(services, limits.MaxRequestBytes)
	if err != nil {
		panic(err) // the protos' HTTP rules are fixed at build time; a test builds them
	}
	mux.Handle(RESTPrefix, rest)
	mux.Handle("GET /openapi.json", OpenAPI())

	names := []string{orreryv1connect.JobServiceName, orreryv1connect.RunServiceName, orreryv1connect.ClusterServiceName,
		orreryv1connect.PipelineServiceName, orreryv1connect.AuditServiceName, orreryv1connect.AccessServiceName,
		orreryv1connect.AlertServiceName, orreryv1connect.ProfileServiceName, orreryv1connect.EventServiceName, orreryv1connect.SourceServiceName}
	if svc.Gateway != nil {
		mux.Handle(orreryv1connect.NewWorkerServiceHandler(&workerServer{gw: svc.Gateway, log: log, claims: newKeyRate(claimsPerSecond, "claims", "with this key")}, opts...))
		names = append(names, orreryv1connect.WorkerServiceName)
	}
	reflector := grpcreflect.NewStaticReflector(append(names, grpchealth.HealthV1ServiceName)...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker(names...)))
	// The body as sent: reading stops past the cap, before decompression;
	// and no body is read before its caller is known.
	return withStatus(preauthenticate(auth, http.MaxBytesHandler(mux, limits.MaxRequestBytes)))
}

// logErrors logs failed calls at debug level (Internal ones are logged
// where they are mapped).
func logErrors(log *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if err != nil {
				log.DebugContext(ctx, "rpc failed", "procedure", req.Spec().Procedure, "code", connect.CodeOf(err), "err", err)
			}
			return res, err
		}
	}
}

// Server serves a handler on a TCP address with HTTP/1.1 and cleartext
// HTTP/2 (h2c), so gRPC clients work without TLS.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// ReadTimeout bounds reading one whole request, body included.
const ReadTimeout = 30 * time.Second

// Listen binds addr ("127.0.0.1:8080"; port 0 picks one).
func Listen(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	draining := make(chan struct{})
	srv := &http.Server{
		Handler:   h,
		Protocols: &protocols,
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), drainingKey{}, (<-chan struct{})(draining))
		},
		// A client that sends its headers or body slowly is cut off, so
		// slow connections cannot pile up.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       ReadTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	var once sync.Once
	srv.RegisterOnShutdown(func() { once.Do(func() { close(draining) }) })
	return &Server{ln: ln, srv: srv}, nil
}

type drainingKey struct{}

// Draining is closed when the server serving the request begins to shut
// down (nil outside one). A call that lasts as long as its client wants
// (the web UI's event streams) ends on it: shutting down waits for the
// calls in flight, and one such stream would hold it to its deadline.
func Draining(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(drainingKey{}).(<-chan struct{})
	return ch
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until ctx ends, then shuts down gracefully (in-flight calls
// finish, up to 10 s).
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.srv.Shutdown(shutdownCtx)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	return err
}

// shardsOf is the cluster's shard count (0 without a job service: events
// are then not served).
func shardsOf(jobs *job.Service) int {
	if jobs == nil {
		return 0
	}
	return jobs.Shards()
}
