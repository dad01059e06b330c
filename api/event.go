package api

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/internal/event"
)

// eventServer implements orrery.v1.EventService: events published to the
// caller's tenant (docs/events.md).
type eventServer struct {
	orreryv1connect.UnimplementedEventServiceHandler
	pool   *pgxpool.Pool
	shards int
	log    *slog.Logger
	rate   *keyRate
}

// publishesPerSecond bounds the events one key publishes a second (a
// burst of as many) through one API process: a tenant's flood is refused
// at the door (ResourceExhausted, Retry-After), before any write.
const publishesPerSecond = 2000

func (s *eventServer) Publish(ctx context.Context, req *connect.Request[orreryv1.PublishRequest]) (*connect.Response[orreryv1.PublishResponse], error) {
	if s.pool == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("events are not served here"))
	}
	p := principalOf(ctx)
	if p.KeyID != uuid.Nil { // (no key: an experiment without authentication)
		if err := s.rate.take(p.KeyID, time.Now()); err != nil {
			return nil, err
		}
	}
	m := req.Msg
	e := event.Event{Type: m.GetType(), ID: m.GetId(), PublishedBy: p.Name}
	if m.GetData() != nil {
		data, err := protojson.Marshal(m.GetData())
		if err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		e.Data = data
	}
	if m.GetTime() != nil {
		t := m.GetTime().AsTime()
		e.Time = &t
	}
	pub, err := event.Publish(ctx, s.pool, p.Tenant, s.shards, e)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.PublishResponse{EventId: pub.ID.String(), Duplicate: pub.Duplicate, ReceiveTime: timestamppb.New(pub.ReceivedAt)}), nil
}
