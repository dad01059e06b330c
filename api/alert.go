package api

import (
	"context"
	"log/slog"
	"strings"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/notify"
	"github.com/orrery-dev/orrery/internal/store"
)

// alertServer implements orrery.v1.AlertService: it reads the alerts and
// notifications the watchdog writes (package watchdog).
type alertServer struct {
	orreryv1connect.UnimplementedAlertServiceHandler
	pool *pgxpool.Pool
	jobs *job.Service
	log  *slog.Logger
}

// listFilter is what both lists share: the caller's tenant and scope, a
// job filter looked up in them, the page size and the keyset position.
type listFilter struct {
	tenant                uuid.UUID
	jobID                 *uuid.UUID
	scoped                bool
	namespaces, scopeJobs []string
	size                  int
	before                auditToken
}

func (s *alertServer) filter(ctx context.Context, ref *orreryv1.JobRef, pageSize int32, token string) (listFilter, error) {
	a := actor(ctx)
	f := listFilter{tenant: a.Tenant, before: firstAuditPage}
	var err error
	if f.size, err = job.PageSize(int(pageSize)); err != nil {
		return f, err
	}
	if token != "" && store.DecodePageToken(token, &f.before) != nil {
		return f, &dag.FieldError{Field: "page_token", Message: "malformed; pass back next_page_token"}
	}
	r, err := optionalRef("job", ref)
	if err != nil {
		return f, err
	}
	if r != (job.Ref{}) {
		j, err := s.jobs.Get(ctx, a, r)
		if err != nil {
			return f, err
		}
		f.jobID = &j.ID
	}
	f.scoped, f.namespaces, f.scopeJobs = a.Scope.Params()
	return f, nil
}

func (s *alertServer) ListAlerts(ctx context.Context, req *connect.Request[orreryv1.ListAlertsRequest]) (*connect.Response[orreryv1.ListAlertsResponse], error) {
	m := req.Msg
	f, err := s.filter(ctx, m.GetJob(), m.GetPageSize(), m.GetPageToken())
	if err == nil && m.GetNamespace() != "" {
		if nerr := dag.ValidateName(m.GetNamespace()); nerr != nil {
			err = &dag.FieldError{Field: "namespace", Message: nerr.Error()}
		}
	}
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	rows, err := store.New(s.pool).ListAlerts(ctx, store.ListAlertsParams{TenantID: f.tenant, OpenOnly: m.GetOpenOnly(), JobID: f.jobID,
		Namespace: m.GetNamespace(), Scoped: f.scoped, ScopeNamespaces: f.namespaces, ScopeJobs: f.scopeJobs,
		BeforeAt: f.before.At, BeforeID: f.before.ID, PageSize: int32(f.size + 1)})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	rows, next := store.NextPage(rows, f.size, func(r store.ListAlertsRow) any { return auditToken{At: r.RaisedAt, ID: r.ID} })
	out := &orreryv1.ListAlertsResponse{Alerts: make([]*orreryv1.Alert, 0, len(rows)), NextPageToken: next}
	for _, r := range rows {
		out.Alerts = append(out.Alerts, &orreryv1.Alert{
			Id: r.ID.String(), Kind: r.Kind, JobId: r.JobID.String(), Namespace: r.Namespace, Job: r.JobName, Message: r.Message,
			RunId: idString(r.RunID), AttemptId: idString(r.AttemptID), ScheduledTime: timeToProto(r.ScheduledFor),
			RaiseTime: timestamppb.New(r.RaisedAt), ResolveTime: timeToProto(r.ResolvedAt), Resolution: r.Resolution,
		})
	}
	return connect.NewResponse(out), nil
}

func (s *alertServer) ListNotifications(ctx context.Context, req *connect.Request[orreryv1.ListNotificationsRequest]) (*connect.Response[orreryv1.ListNotificationsResponse], error) {
	m := req.Msg
	f, err := s.filter(ctx, m.GetJob(), m.GetPageSize(), m.GetPageToken())
	if _, ok := notify.ParseStatus(m.GetStatus()); err == nil && !ok {
		err = &dag.FieldError{Field: "status", Message: "is not one of pending, delivered, failed"}
	}
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	rows, err := store.New(s.pool).ListNotifications(ctx, store.ListNotificationsParams{TenantID: f.tenant, JobID: f.jobID,
		Status: m.GetStatus(), Scoped: f.scoped, ScopeNamespaces: f.namespaces, ScopeJobs: f.scopeJobs,
		BeforeAt: f.before.At, BeforeID: f.before.ID, PageSize: int32(f.size + 1)})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	rows, next := store.NextPage(rows, f.size, func(r store.ListNotificationsRow) any { return auditToken{At: r.CreatedAt, ID: r.ID} })
	out := &orreryv1.ListNotificationsResponse{Notifications: make([]*orreryv1.Notification, 0, len(rows)), NextPageToken: next}
	for _, r := range rows {
		n := &orreryv1.Notification{
			Id: r.ID.String(), JobId: r.JobID.String(), Namespace: r.Namespace, Job: r.JobName, Queue: r.Queue, Event: r.Event,
			RunId: idString(r.RunID), AlertId: idString(r.AlertID), Url: redactURL(r.Url), Status: r.Status, Attempts: r.Attempts,
			LastStatusCode: r.LastStatusCode.Int32, LastError: r.LastError,
			CreateTime: timestamppb.New(r.CreatedAt), FinishTime: timeToProto(r.FinishedAt),
		}
		if notify.Status(r.Status) == notify.Pending {
			n.NextAttemptTime = timestamppb.New(r.NextAttemptAt)
		}
		out.Notifications = append(out.Notifications, n)
	}
	return connect.NewResponse(out), nil
}

func idString(id *uuid.UUID) string {
	if id == nil {
		return ""
	}
	return id.String()
}

// redactURL drops a URL's user information and query (where webhook
// tokens often ride) from what lists show; the job's spec, readable by
// the same callers, has it whole.
func redactURL(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i] + "?…"
	}
	if scheme, rest, ok := strings.Cut(u, "://"); ok {
		if at := strings.Index(rest, "@"); at >= 0 && at < strings.IndexAny(rest+"/", "/") {
			rest = rest[at+1:]
		}
		u = scheme + "://" + rest
	}
	return u
}
