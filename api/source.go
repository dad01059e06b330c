package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/event"
)

// sourceServer implements orrery.v1.SourceService: the caller's tenant's
// event sources (docs/events.md, "Signed webhooks").
type sourceServer struct {
	orreryv1connect.UnimplementedSourceServiceHandler
	access *access.Service
	log    *slog.Logger
}

func (s *sourceServer) CreateSource(ctx context.Context, req *connect.Request[orreryv1.CreateSourceRequest]) (*connect.Response[orreryv1.CreateSourceResponse], error) {
	m := req.Msg
	src, err := s.access.CreateSource(ctx, principalOf(ctx), access.Source{Name: m.GetName(), Namespace: m.GetNamespace(), Kind: m.GetKind(), Secret: m.GetSecret()})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.CreateSourceResponse{Source: eventSourceToProto(src)}), nil
}

func (s *sourceServer) ListSources(ctx context.Context, _ *connect.Request[orreryv1.ListSourcesRequest]) (*connect.Response[orreryv1.ListSourcesResponse], error) {
	srcs, err := s.access.ListSources(ctx, principalOf(ctx))
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.ListSourcesResponse{Sources: make([]*orreryv1.EventSource, len(srcs))}
	for i, src := range srcs {
		out.Sources[i] = eventSourceToProto(src)
	}
	return connect.NewResponse(out), nil
}

func (s *sourceServer) DeleteSource(ctx context.Context, req *connect.Request[orreryv1.DeleteSourceRequest]) (*connect.Response[orreryv1.DeleteSourceResponse], error) {
	src, err := s.access.DeleteSource(ctx, principalOf(ctx), req.Msg.GetName())
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.DeleteSourceResponse{Source: eventSourceToProto(src)}), nil
}

func eventSourceToProto(s access.Source) *orreryv1.EventSource {
	return &orreryv1.EventSource{Name: s.Name, Namespace: s.Namespace, Kind: s.Kind, Secret: s.Secret,
		HookPath: s.HookPath(), CreateTime: timestamppb.New(s.CreateTime)}
}

// deliveriesPerSecond bounds the deliveries one source takes a second
// through one API process (as publishesPerSecond a key's publishes).
const deliveriesPerSecond = publishesPerSecond

// HookPrefix is where sources take deliveries: HookPrefix + TENANT:NAME.
const HookPrefix = "/api/v1/hooks/"

// hookHandler takes deliveries to event sources: POST
// /api/v1/hooks/TENANT:NAME, with no API key (the provider signs the body
// instead). In order, each step refusing before the next costs anything:
// the source looked up, guarded per client address as keys are (an
// unknown source and a bad signature answer alike, 401); the body read up
// to its bound (413 past it); its secret resolved under this process's
// grants for the source's namespace; the signature verified (401, nothing
// written); the event read from the provider's fields (422, naming the
// field); the source's rate (429); the event published (202, or 200 for a
// duplicate).
type hookHandler struct {
	access  *access.Service
	pool    *pgxpool.Pool
	shards  int
	secrets *executor.SecretPolicy
	rate    *keyRate
	log     *slog.Logger
}

// hookAnswer is a delivery's answer: the event it made, or the first one
// of its id.
type hookAnswer struct {
	EventID     string    `json:"eventId"`
	Duplicate   bool      `json:"duplicate"`
	ReceiveTime time.Time `json:"receiveTime"`
}

func (h *hookHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(code connect.Code, format string, args ...any) {
		writeRESTError(w, connect.NewError(code, fmt.Errorf(format, args...)))
	}
	if h.pool == nil {
		fail(connect.CodeUnavailable, "events are not served here")
		return
	}
	ctx := r.Context()
	tenant, name, _ := strings.Cut(r.PathValue("source"), ":")
	src, err := h.access.HookSource(ctx, tenant, name)
	if errors.Is(err, access.ErrUnauthenticated) {
		h.log.DebugContext(ctx, "a delivery to no source", "path", r.URL.Path)
		fail(connect.CodeUnauthenticated, "%s", event.ErrSignature.Error())
		return
	}
	if err != nil { // throttled (with Retry-After), or the database
		writeRESTError(w, toConnect(ctx, h.log, err).(*connect.Error))
		return
	}
	// The body is read once the source is known (a caller without one is
	// throttled before it is read), up to its bound.
	body, err := io.ReadAll(io.LimitReader(r.Body, event.MaxDelivery+1))
	if err != nil {
		fail(connect.CodeInvalidArgument, "the delivery's body could not be read")
		return
	}
	if len(body) > event.MaxDelivery {
		writeRESTErrorStatus(w, http.StatusRequestEntityTooLarge, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("the delivery is over %d bytes, an event's bound", event.MaxDelivery)))
		return
	}
	secret, err := h.secrets.Resolve(src.Tenant, src.Namespace, src.Secret)
	if err != nil {
		// The operator's to fix; the provider is told only that it is not
		// served now (and retries).
		h.log.ErrorContext(ctx, "an event source's secret cannot be read on this server", "source", src.Tenant+":"+src.Name, "err", err)
		fail(connect.CodeUnavailable, "the source cannot verify deliveries on this server now; see the server's log")
		return
	}
	e, err := event.FromDelivery(src.Kind, []byte(secret), r.Header, body, time.Now())
	if errors.Is(err, event.ErrSignature) {
		// One answer for every refusal, whatever the source or what the
		// signature lacks, so that a caller learns nothing of which
		// sources exist; the log says why.
		h.access.FailedDelivery(ctx)
		h.log.DebugContext(ctx, "a delivery refused", "source", src.Tenant+":"+src.Name, "err", err)
		fail(connect.CodeUnauthenticated, "%s", event.ErrSignature.Error())
		return
	}
	if err != nil {
		writeRESTError(w, toConnect(ctx, h.log, err).(*connect.Error))
		return
	}
	if err := h.rate.take(src.ID, time.Now()); err != nil {
		writeRESTError(w, err.(*connect.Error))
		return
	}
	e.Source = src.Name
	pub, err := event.Publish(ctx, h.pool, src.TenantID, h.shards, e)
	if err != nil {
		writeRESTError(w, toConnect(ctx, h.log, err).(*connect.Error))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if pub.Duplicate {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusAccepted)
	}
	_ = json.NewEncoder(w).Encode(hookAnswer{EventID: pub.ID.String(), Duplicate: pub.Duplicate, ReceiveTime: pub.ReceivedAt.UTC()})
}
