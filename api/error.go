package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
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
		workers   *run.WorkerLimitError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &es):
		return unprocessable(es)
	case errors.As(err, &invalid):
		return unprocessable(invalid)
	case errors.As(err, &sched):
		return unprocessable(errors.New("schedule." + sched.Error()))
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
	case errors.As(err, &workers):
		return connect.NewError(connect.CodeResourceExhausted, workers)
	case errors.Is(err, job.ErrDeleted), errors.Is(err, run.ErrCannotRetry), errors.Is(err, run.ErrBackfillNotRunning):
		ce := connect.NewError(connect.CodeFailedPrecondition, err)
		setStatus(ce.Meta(), http.StatusConflict) // the resource's state refuses the call
		return ce
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case store.IsAmbiguous(err):
		return unavailable(errors.New("the database could not tell whether the change was made; read before retrying, or retry with the same idempotency key"))
	case store.IsUnavailable(err):
		if log != nil {
			log.ErrorContext(ctx, "database unavailable", "err", err) // once per outage: see store.Outage
		}
		return unavailable(errors.New("the database is unavailable; retry later"))
	}
	if log != nil {
		log.ErrorContext(ctx, "internal error", "err", err)
	}
	return connect.NewError(connect.CodeInternal, errors.New("internal error; see the server log"))
}

// unprocessable is InvalidArgument for a request that was read but holds a
// value that is not valid (the error names its field): 422 over REST,
// where 400 says the request could not be read (malformed JSON, an unknown
// field).
func unprocessable(err error) *connect.Error {
	ce := connect.NewError(connect.CodeInvalidArgument, err)
	setStatus(ce.Meta(), http.StatusUnprocessableEntity)
	return ce
}

// unavailable is Unavailable with a Retry-After of a second: the database
// comes back, or the client's retry with backoff takes it from there.
func unavailable(err error) *connect.Error {
	ce := connect.NewError(connect.CodeUnavailable, err)
	ce.Meta().Set("Retry-After", "1")
	return ce
}
