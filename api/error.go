package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

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
		denied    *run.DeniedError
	)
	var item *job.ItemError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &item) && (errors.As(err, &es) || errors.As(err, &invalid)):
		return unprocessable(item) // each line names the job of the apply it is about
	case errors.As(err, &es):
		return unprocessable(es)
	case errors.As(err, &invalid):
		return unprocessable(invalid)
	case errors.As(err, &sched):
		return unprocessable(errors.New("schedule." + sched.Error()))
	case errors.Is(err, job.ErrNotFound), errors.Is(err, run.ErrNotFound), errors.Is(err, access.ErrNotFound), errors.Is(err, run.ErrNoStep):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.As(err, &denied):
		return connect.NewError(connect.CodePermissionDenied, denied)
	case errors.Is(err, job.ErrAlreadyExists), errors.Is(err, job.ErrIdempotencyConflict), errors.Is(err, access.ErrExists),
		errors.Is(err, run.ErrDecidedAlready):
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
	case errors.Is(err, job.ErrDeleted), errors.Is(err, run.ErrCannotRetry), errors.Is(err, run.ErrBackfillNotRunning),
		errors.Is(err, access.ErrProfileInUse), errors.Is(err, run.ErrNotAwaitingApproval):
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

// maxErrorMessage bounds an error's message as a client reads it: one
// that quotes what it refuses (a 3 MiB cron expression) would otherwise
// answer megabytes, past what the REST transcoder buffers.
const maxErrorMessage = 16 << 10

// boundErrors cuts a message past maxErrorMessage, saying so.
func boundErrors() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			var ce *connect.Error
			if err == nil || !errors.As(err, &ce) || len(ce.Message()) <= maxErrorMessage {
				return res, err
			}
			msg := strings.ToValidUTF8(ce.Message()[:maxErrorMessage], "")
			return res, withMessage(ce, msg+"... (cut: the message was "+strconv.Itoa(len(ce.Message()))+" bytes)")
		}
	}
}

// withMessage is ce with another message, its code, metadata (an HTTP
// status, Retry-After) and details kept.
func withMessage(ce *connect.Error, msg string) *connect.Error {
	if msg == ce.Message() {
		return ce
	}
	out := connect.NewError(ce.Code(), errors.New(msg))
	for k, vs := range ce.Meta() {
		for _, v := range vs {
			out.Meta().Add(k, v)
		}
	}
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	return out
}
