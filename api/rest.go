package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// RESTPrefix is where the REST API is served: the paths and verbs of the
// protos' google.api.http rules (api/gen/openapi/openapi.json), transcoded
// by vanguard into calls of the same Connect handlers, so that REST goes
// through the same authentication, authorization, limits and audit.
const RESTPrefix = "/api/v1/"

// statusHeader is how a handler asks for an HTTP status that the gRPC
// code cannot say: 201 for a create, 422 for a value that is not valid,
// 409 for a state that refuses the call. The REST writer applies it when
// it is of the class of the status the code maps to, and every response
// drops it.
const statusHeader = "Orrery-Http-Status"

// idempotencyHeader carries an idempotency key over REST (or Connect),
// instead of the request's idempotency_key field.
const idempotencyHeader = "Idempotency-Key"

// newREST is the transcoder for services: REST in, Connect (binary
// protobuf) to the handlers. A service without HTTP rules has no REST
// path. Bodies are bounded before vanguard buffers them (see restGuard).
func newREST(services []service, maxBody int64) (http.Handler, error) {
	vs := make([]*vanguard.Service, 0, len(services))
	for _, s := range services {
		vs = append(vs, vanguard.NewService(s.path, s.handler))
	}
	t, err := vanguard.NewTranscoder(vs,
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec { return newStrictRESTJSON(res) }),
		vanguard.WithDefaultServiceOptions(
			vanguard.WithTargetProtocols(vanguard.ProtocolConnect),
			vanguard.WithTargetCodecs(vanguard.CodecProto),
			vanguard.WithMaxMessageBufferBytes(uint32(min(maxBody, 1<<31))),
		),
		vanguard.WithUnknownHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeRESTError(w, connect.NewError(connect.CodeNotFound, errors.New("no such path: "+r.Method+" "+r.URL.Path+" (see /openapi.json)")))
		})),
	)
	if err != nil {
		return nil, err
	}
	rules, err := pathRules(services)
	if err != nil {
		return nil, err
	}
	return http.NewCrossOriginProtection().Handler(restGuard(restPaths(t, rules), maxBody)), nil
}

// restGuard refuses, before vanguard reads a body, what it would take
// without a bound or a type: a compressed body (vanguard inflates it
// whole: a small gzip bomb is gigabytes; 415), a declared length past the
// cap (vanguard reserves it up front; 413), and a body that is not JSON
// (a browser's cross-site form or beacon sends none or another type;
// 415). A body of no declared length is read whole first, up to the cap
// (413 past it). A body-less POST (a trigger) needs no type; a GET takes
// no body (400), its parameters being the query's. Cross-origin browser
// requests are refused beside it (http.CrossOriginProtection).
func restGuard(next http.Handler, maxBody int64) http.Handler {
	tooLarge := func(w http.ResponseWriter) {
		writeRESTErrorStatus(w, http.StatusRequestEntityTooLarge, connect.NewError(connect.CodeResourceExhausted,
			errors.New("the body is past the limit of "+strconv.FormatInt(maxBody, 10)+" bytes")))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ce := r.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
			writeRESTErrorStatus(w, http.StatusUnsupportedMediaType, connect.NewError(connect.CodeInvalidArgument,
				errors.New("Content-Encoding "+ce+": REST bodies are sent uncompressed")))
			return
		}
		if r.ContentLength > maxBody {
			tooLarge(w)
			return
		}
		if r.ContentLength < 0 {
			// No declared length (chunked): read here, up to the cap, so
			// that a body past it is 413 (vanguard would answer 429).
			b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
			var capped *http.MaxBytesError // the server's own cap, the same
			if errors.As(err, &capped) || int64(len(b)) > maxBody {
				tooLarge(w)
				return
			}
			if err != nil {
				writeRESTError(w, connect.NewError(connect.CodeInvalidArgument, errors.New("reading the body: "+err.Error())))
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}
		r.Header.Set(jsonNamesHeader, "1")
		if r.ContentLength > 0 && r.Method == http.MethodGet {
			writeRESTError(w, connect.NewError(connect.CodeInvalidArgument,
				errors.New("a GET request has no body: its parameters are the query's")))
			return
		}
		if r.ContentLength > 0 {
			if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.TrimSpace(strings.ToLower(mt)) != "application/json" {
				writeRESTErrorStatus(w, http.StatusUnsupportedMediaType, connect.NewError(connect.CodeInvalidArgument,
					errors.New("Content-Type: a REST body is application/json")))
				return
			}
			// Vanguard matches the type exactly; any case and parameters
			// (charset=UTF-8, the only one JSON has) were taken above.
			r.Header.Set("Content-Type", "application/json")
		}
		next.ServeHTTP(w, r)
	})
}

// service is a Connect service's path and handler.
type service struct {
	path    string
	handler http.Handler
}

// strictRESTJSON is vanguard's JSON codec that refuses unknown fields,
// naming them, as strictJSON does for Connect's JSON.
type strictRESTJSON struct{ *vanguard.JSONCodec }

func newStrictRESTJSON(res vanguard.TypeResolver) strictRESTJSON {
	c := vanguard.NewJSONCodec(res)
	c.UnmarshalOptions.DiscardUnknown = false
	// Zero values are written (a REST client finds every field), but not
	// an unset message as null, which the document's schemas do not allow.
	c.MarshalOptions.EmitUnpopulated = false
	c.MarshalOptions.EmitDefaultValues = true
	return strictRESTJSON{c}
}

// Unmarshal's errors are InvalidArgument (400): vanguard answers a plain
// error as Unknown (500).
func (c strictRESTJSON) Unmarshal(b []byte, m proto.Message) error {
	if err := unmarshalStrict(c.UnmarshalOptions, b, m); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	return nil
}

// UnmarshalField serves a rule whose body is one field (body: "field");
// every rule of Orrery's takes the whole message (body: "*"), read by
// Unmarshal, so this only keeps vanguard's error InvalidArgument.
func (c strictRESTJSON) UnmarshalField(b []byte, m proto.Message, fd protoreflect.FieldDescriptor) error {
	if err := c.JSONCodec.UnmarshalField(b, m, fd); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	return nil
}

// statusWriter applies statusHeader (when rest) and drops it. On REST, it
// holds back a 500 until the end (see finish).
type statusWriter struct {
	http.ResponseWriter
	rest, wrote bool
	held        *bytes.Buffer // a REST 500's body, held back
	method      string        // the request's, for a 405's message
	dropBody    bool          // a REST 405's text, replaced by JSON
}

func (w *statusWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	h := w.ResponseWriter.Header()
	if s := h.Get(statusHeader); s != "" {
		h.Del(statusHeader)
		if n, err := strconv.Atoi(s); err == nil && w.rest && n/100 == code/100 {
			code = n
		}
	}
	if w.rest && code >= 400 && h.Get("Content-Type") == "application/proto" {
		h.Set("Content-Type", "application/json") // vanguard's label for a body refused before it was read; the answer is JSON
	}
	if w.rest && code == http.StatusInternalServerError {
		w.held = new(bytes.Buffer)
		return
	}
	if w.rest && code == http.StatusMethodNotAllowed && !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		// The router's plain text, as every other REST error: JSON.
		allow := strings.Split(h.Get("Allow"), ",") // in no set order
		slices.Sort(allow)
		body, _ := json.Marshal(restErrorBody{int(connect.CodeUnimplemented),
			w.method + " is not an operation of this path; it takes " + strings.Join(allow, ", ") + " (see /openapi.json)", []any{}})
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.ResponseWriter.WriteHeader(code)
		_, _ = w.ResponseWriter.Write(body)
		w.dropBody = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.dropBody {
		return len(b), nil
	}
	if w.held != nil {
		if w.held.Len()+len(b) > 64<<10 {
			return 0, errors.New("error body too long")
		}
		return w.held.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.held == nil {
		if !w.wrote {
			w.WriteHeader(http.StatusOK)
		}
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// requestFaults are the messages of the errors vanguard answers as
// Internal (500) though the request is at fault: a query parameter the
// request has no field for, a body where the method takes none.
var requestFaults = []string{"does not correspond to any field", "request should have no body", "empty field path"}

// finish writes a held-back 500: as 400 when vanguard's message says the
// request was at fault, as it was otherwise.
func (w *statusWriter) finish() {
	// gRPC sends an error's metadata as trailers, written once the
	// handler returns.
	w.ResponseWriter.Header().Del(http.TrailerPrefix + statusHeader)
	if w.held == nil {
		return
	}
	w.ResponseWriter.Header().Del("Content-Length") // the held body may have been cut
	code, body := http.StatusInternalServerError, w.held.Bytes()
	var st struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil {
		for _, f := range requestFaults {
			if strings.Contains(st.Message, f) {
				code = http.StatusBadRequest
				body, _ = json.Marshal(restErrorBody{int(connect.CodeInvalidArgument), st.Message, []any{}})
				w.ResponseWriter.Header().Set("Content-Type", "application/json")
				w.ResponseWriter.Header().Set("Content-Length", strconv.Itoa(len(body)))
				break
			}
		}
	}
	w.ResponseWriter.WriteHeader(code)
	_, _ = w.ResponseWriter.Write(body)
}

// withStatus serves next with the statusHeader applied on REST paths and
// dropped everywhere.
func withStatus(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, rest: strings.HasPrefix(r.URL.Path, RESTPrefix), method: r.Method}
		r.Header.Del(jsonNamesHeader) // the server's own mark (restGuard)
		next.ServeHTTP(sw, r)
		sw.finish()
	})
}

// restErrorBody is an error as REST answers it: a google.rpc.Status in JSON.
type restErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Details []any  `json:"details"`
}

// setStatus asks for an HTTP status on REST (see statusHeader).
func setStatus(h http.Header, code int) { h.Set(statusHeader, strconv.Itoa(code)) }

// restStatus is the HTTP status of a code, as vanguard maps it.
var restStatus = map[connect.Code]int{
	connect.CodeInvalidArgument:    http.StatusBadRequest,
	connect.CodeUnauthenticated:    http.StatusUnauthorized,
	connect.CodePermissionDenied:   http.StatusForbidden,
	connect.CodeNotFound:           http.StatusNotFound,
	connect.CodeAlreadyExists:      http.StatusConflict,
	connect.CodeResourceExhausted:  http.StatusTooManyRequests,
	connect.CodeUnavailable:        http.StatusServiceUnavailable,
	connect.CodeFailedPrecondition: http.StatusBadRequest,
	connect.CodeAborted:            http.StatusConflict,
}

// writeRESTError answers err as the REST transcoder answers a handler's
// error: its status and a JSON google.rpc.Status, with its metadata as
// headers (Retry-After).
func writeRESTError(w http.ResponseWriter, err *connect.Error) {
	code, ok := restStatus[err.Code()]
	if !ok {
		code = http.StatusInternalServerError
	}
	writeRESTErrorStatus(w, code, err)
}

// writeRESTErrorStatus is writeRESTError with the HTTP status given.
func writeRESTErrorStatus(w http.ResponseWriter, code int, err *connect.Error) {
	for k, vs := range err.Meta() {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	body, _ := json.Marshal(restErrorBody{int(err.Code()), err.Message(), []any{}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// idempotencyKey is a request's key: its field, or the Idempotency-Key
// header; both set and different is refused.
func idempotencyKey(field string, h http.Header) (string, error) {
	header := h.Get(idempotencyHeader)
	switch {
	case header == "" || header == field:
		return field, nil
	case field == "":
		return header, nil
	}
	return "", connect.NewError(connect.CodeInvalidArgument, errors.New("idempotency_key: differs from the Idempotency-Key header"))
}
