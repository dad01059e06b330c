package api

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"
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
}

func (s *eventServer) Publish(ctx context.Context, req *connect.Request[orreryv1.PublishRequest]) (*connect.Response[orreryv1.PublishResponse], error) {
	if s.pool == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("events are not served here"))
	}
	m := req.Msg
	e := event.Event{Type: m.GetType(), ID: m.GetId()}
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
	p, err := event.Publish(ctx, s.pool, principalOf(ctx).Tenant, s.shards, e)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	return connect.NewResponse(&orreryv1.PublishResponse{EventId: p.ID.String(), Duplicate: p.Duplicate, ReceiveTime: timestamppb.New(p.ReceivedAt)}), nil
}
