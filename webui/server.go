package webui

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/orrery-dev/orrery/api"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/job"
)

//go:embed static
var staticFS embed.FS

// Config is what the UI needs.
type Config struct {
	// API is the Connect API handler; the UI calls it in-process.
	API http.Handler
	// Access keeps the sessions (the same Service as the API's KeyAuth,
	// so a key revoked there ends its sessions here at once).
	Access *access.Service
	// AuthOff: `--auth none`; every visitor acts as the API's NoAuth
	// principal, and there is no sign-in.
	AuthOff bool
	// SecureCookies marks the session cookie Secure even when the request
	// did not arrive over TLS here (TLS ends at a proxy in front).
	SecureCookies bool
	Log           *slog.Logger
}

func (c Config) validate() error {
	switch {
	case c.API == nil:
		return errors.New("webui: Config.API is required")
	case c.Access == nil && !c.AuthOff:
		return errors.New("webui: Config.Access is required unless AuthOff")
	}
	return nil
}

// Server is the web UI's HTTP handler.
type Server struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	clients clients
	pages   pages
	events  *hub
	// offCSRF is the CSRF token of every form when authentication is off
	// (there is no session to hold one).
	offCSRF string
}

// clients call the API in-process.
type clients struct {
	jobs     orreryv1connect.JobServiceClient
	runs     orreryv1connect.RunServiceClient
	cluster  orreryv1connect.ClusterServiceClient
	audit    orreryv1connect.AuditServiceClient
	access   orreryv1connect.AccessServiceClient
	pipeline orreryv1connect.PipelineServiceClient
	alerts   orreryv1connect.AlertServiceClient
}

// inProcess hands a request to the API handler without a network hop.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// New returns the UI's handler. Mount it at "/" beside the API (whose
// paths begin with "/orrery.v1.", "/grpc." and "/api/v1/", and
// /openapi.json).
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pg, err := parsePages()
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: inProcess{cfg.API}}
	const base = "http://in-process"
	s := &Server{cfg: cfg, log: log, mux: http.NewServeMux(), pages: pg, offCSRF: randomString(),
		clients: clients{
			jobs:    orreryv1connect.NewJobServiceClient(hc, base),
			runs:    orreryv1connect.NewRunServiceClient(hc, base),
			cluster: orreryv1connect.NewClusterServiceClient(hc, base),
			audit:   orreryv1connect.NewAuditServiceClient(hc, base),
			access:  orreryv1connect.NewAccessServiceClient(hc, base),
			alerts:  orreryv1connect.NewAlertServiceClient(hc, base),

			pipeline: orreryv1connect.NewPipelineServiceClient(hc, base),
		}}
	s.events = newHub(s.clients.runs, log)
	static, _ := fs.Sub(staticFS, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler(static)))
	s.mux.HandleFunc("GET /login", s.loginPage)
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("POST /logout", s.logout)
	s.handle("GET /{$}", s.overviewPage)
	s.handle("GET /jobs", s.jobsPage)
	s.handle("GET /api", s.referencePage)
	s.handle("GET /jobs/{ns}/{name}", s.jobPage)
	s.handle("POST /jobs/{ns}/{name}/{action}", s.jobAction)
	s.handle("GET /runs", s.runsPage)
	s.handle("GET /runs/{id}", s.runPage)
	s.handle("GET /runs/{id}/status", s.runStatus)
	s.handle("GET /runs/{id}/events", s.runEvents)
	s.handle("POST /runs/{id}/cancel", s.cancelRun)
	s.handle("POST /runs/{id}/retry", s.retryRun)
	s.handle("POST /runs/{id}/steps/{step}/decide", s.decideStep)
	s.handle("POST /runs/{id}/tasks/{task}/retry", s.retryTask)
	s.handle("GET /dlq", s.dlqPage)
	s.handle("POST /dlq/replay", s.dlqReplay)
	s.handle("GET /cluster", s.clusterPage)
	s.handle("GET /audit", s.auditPage)
	s.handle("GET /forecast", s.forecastPage)
	s.handle("GET /alerts", s.alertsPage)
	s.handle("/", func(w http.ResponseWriter, r *http.Request, v *view) error {
		return errNotFound
	})
	return s, nil
}

// ServeHTTP implements http.Handler. A panic in a page is an internal
// error for that request, logged, not a dropped connection.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.ErrorContext(r.Context(), "web ui: page panicked", "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			http.Error(w, "internal error; see the server log", http.StatusInternalServerError)
		}
	}()
	h := w.Header()
	h.Set("Content-Security-Policy", csp(false))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	if !wellFormed(r) {
		http.Error(w, "the address holds a NUL byte, a control character or invalid UTF-8", http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodPost && !sameOrigin(r) {
		s.fail(w, r, nil, errCSRF)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// sameOrigin rejects a POST that the browser says came from another site
// or origin (another port of the same host is another origin; SameSite
// cookies do not tell them apart). Clients that send neither header
// (curl, tests) still need the form's CSRF token.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

// wellFormed reports whether the path and query are valid UTF-8 without
// NUL or control characters (the API and the database refuse them; better
// a 400 here than a 500 there).
func wellFormed(r *http.Request) bool {
	bad := func(s string) bool {
		return !utf8.ValidString(s) || strings.IndexFunc(s, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0
	}
	if bad(r.URL.Path) {
		return false
	}
	q, err := url.QueryUnescape(r.URL.RawQuery)
	return err == nil && !bad(q)
}

// Mount serves the UI beside the API on one handler: API paths go to
// apiHandler, the rest to the UI.
func Mount(apiHandler http.Handler, ui http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/orrery.v1.") || strings.HasPrefix(r.URL.Path, "/grpc.") ||
			strings.HasPrefix(r.URL.Path, api.RESTPrefix) || r.URL.Path == "/openapi.json" {
			apiHandler.ServeHTTP(w, r)
			return
		}
		ui.ServeHTTP(w, r)
	})
}

// view is what every page handler gets: the signed-in principal, the
// context that calls the API as it, and the CSRF token for forms.
type view struct {
	P    access.Principal
	CSRF string
	ctx  context.Context
}

// can reports whether the principal holds role on a job (or its
// namespace, job ""), so that a button it would be refused is not drawn.
func (v *view) can(role access.Role, namespace, name string) bool {
	return v.P.RoleOn(access.Resource{Namespace: namespace, Job: name}).Allows(role)
}

type pageFunc func(w http.ResponseWriter, r *http.Request, v *view) error

// handle registers a page that needs a signed-in principal: without one,
// GET goes to the sign-in page and anything else is 401; every POST must
// carry the session's CSRF token.
func (s *Server) handle(pattern string, f pageFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		v, err := s.viewOf(r)
		if errors.Is(err, access.ErrUnauthenticated) {
			if r.Method == http.MethodGet && r.Header.Get("Accept") != "text/event-stream" {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			s.fail(w, r, nil, errSignIn)
			return
		}
		if err != nil {
			s.fail(w, r, nil, err)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if got := r.PostFormValue("csrf"); subtle.ConstantTimeCompare([]byte(got), []byte(v.CSRF)) != 1 {
				s.fail(w, r, v, errCSRF)
				return
			}
		}
		if err := f(w, r, v); err != nil {
			s.fail(w, r, v, err)
		}
	})
}

const sessionCookie = "orrery_session"

// viewOf finds the request's principal: its session's, or NoAuth's.
func (s *Server) viewOf(r *http.Request) (*view, error) {
	if s.cfg.AuthOff {
		p, _ := api.NoAuth{}.Authenticate(r.Context(), nil)
		return &view{P: p, CSRF: s.offCSRF, ctx: api.WithPrincipal(r.Context(), p)}, nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, access.ErrUnauthenticated
	}
	sess, err := s.cfg.Access.Session(r.Context(), c.Value)
	if err != nil {
		return nil, err
	}
	return &view{P: sess.Principal, CSRF: sess.CSRF, ctx: api.WithPrincipal(r.Context(), sess.Principal)}, nil
}

// Errors of the UI itself.
var (
	errNotFound = errors.New("no such page")
	errSignIn   = errors.New("sign in first")
	errCSRF     = errors.New("this form has expired or did not come from this site; reload the page and try again")
	// errTooManyStreams: a principal (or the server) has as many live run
	// pages open as it may.
	errTooManyStreams = errors.New("too many live pages open; close some and reload")
)

// badInput is a request the UI refuses before calling the API.
type badInput string

func (b badInput) Error() string { return string(b) }

// fail renders an error page with the status the error deserves.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, v *view, err error) {
	status, msg := http.StatusInternalServerError, "Something went wrong; the server log says what."
	var ce *connect.Error
	var bad badInput
	var throttled *access.ThrottledError
	switch {
	case errors.As(err, &throttled):
		status, msg = http.StatusTooManyRequests, "Too many failed sign-ins from your address; "+strings.TrimPrefix(throttled.Error(), "too many failed authentications from this address; ")+"."
		w.Header().Set("Retry-After", strconv.Itoa(int(throttled.RetryAfter.Seconds())+1))
	case errors.Is(err, errNotFound), errors.Is(err, job.ErrNotFound):
		status, msg = http.StatusNotFound, "Not found."
	case errors.Is(err, errSignIn), errors.Is(err, access.ErrUnauthenticated):
		status, msg = http.StatusUnauthorized, "Sign in first."
	case errors.Is(err, errCSRF):
		status, msg = http.StatusForbidden, err.Error()
	case errors.Is(err, errTooManyStreams):
		status, msg = http.StatusTooManyRequests, err.Error()
	case errors.As(err, &bad):
		status, msg = http.StatusBadRequest, bad.Error()
	case errors.As(err, &ce):
		switch ce.Code() {
		case connect.CodeNotFound:
			status, msg = http.StatusNotFound, "Not found: "+ce.Message()
		case connect.CodePermissionDenied:
			status, msg = http.StatusForbidden, "Not allowed: "+ce.Message()
		case connect.CodeUnauthenticated:
			status, msg = http.StatusUnauthorized, "Sign in first."
		case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeAborted:
			status, msg = http.StatusBadRequest, ce.Message()
		case connect.CodeUnavailable:
			status, msg = http.StatusServiceUnavailable, "The database is unavailable; retry in a moment."
		default:
			s.log.ErrorContext(r.Context(), "web ui: API call failed", "path", r.URL.Path, "err", err)
		}
	default:
		s.log.ErrorContext(r.Context(), "web ui: page failed", "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, v, status, "error", map[string]any{"Status": status, "StatusText": http.StatusText(status), "Message": msg})
}

// staticHandler serves the embedded files, cached for a day.
func staticHandler(files fs.FS) http.Handler {
	fsrv := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=86400")
		fsrv.ServeHTTP(w, r)
	})
}

const flashCookie = "orrery_flash"

// seeOther answers a POST by sending the browser to a page on this site
// (the post/redirect/get pattern), with a message for the next page in a
// short-lived cookie (not in the address, where anyone could write one).
func seeOther(w http.ResponseWriter, r *http.Request, to, flash string) error {
	to = safeNext(to)
	if flash != "" {
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(flash)), Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: 60})
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

// takeFlash reads and clears the flash message, if any.
func takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1})
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(b) > 500 || !utf8.Valid(b) {
		return ""
	}
	return string(b)
}

func errorf(format string, args ...any) error { return badInput(fmt.Sprintf(format, args...)) }

// csp is every page's Content-Security-Policy: its own scripts, styles and
// images only; inlineStyles lets a page's styles be inline too (the API
// reference's viewer).
func csp(inlineStyles bool) string {
	style := "style-src 'self'"
	if inlineStyles {
		style += " 'unsafe-inline'"
	}
	return "default-src 'self'; img-src 'self' data:; " + style + "; script-src 'self'; frame-ancestors 'none'; form-action 'self'"
}
