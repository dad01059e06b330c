package api

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"connectrpc.com/connect"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

// toConnect maps an engine error to a Connect error whose message names the
// field at fault. Unknown errors are logged and hidden behind Internal.
func toConnect(ctx context.Context, log *slog.Logger, err error) error {
	var (
		es        dag.Errors
		invalid   *dag.FieldError
		conflict  *job.VersionConflictError
		sched     *schedule.Error
		throttled *access.ThrottledError
		exceeded  *usage.ExceededError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &es):
		return connect.NewError(connect.CodeInvalidArgument, es)
	case errors.As(err, &invalid):
		return connect.NewError(connect.CodeInvalidArgument, invalid)
	case errors.As(err, &sched):
		return connect.NewError(connect.CodeInvalidArgument, errors.New("schedule."+sched.Error()))
	case errors.Is(err, job.ErrNotFound), errors.Is(err, run.ErrNotFound), errors.Is(err, access.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, job.ErrAlreadyExists), errors.Is(err, job.ErrIdempotencyConflict), errors.Is(err, access.ErrExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.As(err, &conflict):
		return connect.NewError(connect.CodeAborted, err)
	case errors.As(err, &throttled):
		ce := connect.NewError(connect.CodeResourceExhausted, err)
		ce.Meta().Set("Retry-After", strconv.Itoa(int(throttled.RetryAfter.Seconds())+1))
		return ce
	case errors.As(err, &exceeded):
		return connect.NewError(connect.CodeResourceExhausted, exceeded)
	case errors.Is(err, job.ErrDeleted), errors.Is(err, run.ErrCannotRetry), errors.Is(err, run.ErrBackfillNotRunning):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case store.IsAmbiguous(err):
		return connect.NewError(connect.CodeUnavailable, errors.New("the database could not tell whether the change was made; read before retrying, or retry with the same idempotency key"))
	case store.IsUnavailable(err):
		if log != nil {
			log.ErrorContext(ctx, "database unavailable", "err", err) // once per outage: see store.Outage
		}
		return connect.NewError(connect.CodeUnavailable, errors.New("the database is unavailable; retry later"))
	}
	if log != nil {
		log.ErrorContext(ctx, "internal error", "err", err)
	}
	return connect.NewError(connect.CodeInternal, errors.New("internal error; see the server log"))
}
