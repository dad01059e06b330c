package store

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// ErrUnavailable is what callers see, wrapped, when the database cannot be
// reached; IsUnavailable recognises it and the driver's own errors.
var ErrUnavailable = errors.New("store: the database is unavailable")

// IsUnavailable reports whether err says the database cannot be reached
// (refused or dropped connections, a server shutting down or not yet
// accepting connections, a closed pool), as opposed to an error in what was
// asked. Callers answer Unavailable and retry later.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return sessionEnded(pe.Code) || pe.Code == "53300" // or too many connections
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's own deadline, not the database's state
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.Is(err, ErrUnavailable), errors.As(err, &ce), errors.As(err, &ne),
		errors.Is(err, puddle.ErrClosedPool), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return looksUnavailable(err.Error())
}

// sessionEnded reports whether SQLSTATE code says the server ended or
// lost the session: a connection exception (class 08), the server
// shutting down, crashing or not accepting connections yet (57P01,
// 57P02, 57P03).
func sessionEnded(code string) bool {
	return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03"
}

// looksUnavailable classifies an error by its text, for errors that reach
// a log as strings (River logs them so).
func looksUnavailable(s string) bool {
	for _, sub := range []string{"failed to connect", "connection refused", "conn closed", "connection reset",
		"broken pipe", "closed pool", "unexpected EOF", "SQLSTATE 57P0", "the database system is shutting down",
		"the database system is starting up"} {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// Outage keeps a database outage from flooding the log: every component
// of a process (scheduler, reaper, shard heartbeats, workers, River, the
// API) fails at once and retries several times a second. Wrapped around
// the process's log handler (OutageHandler), it lets the first record whose
// error says the database is unavailable through, drops the ones that
// follow, and, once a ping succeeds again, logs one line saying the
// database is back and how many records it dropped meanwhile.
type Outage struct {
	mu      sync.Mutex
	down    bool
	dropped int
	ping    func(context.Context) error
	every   time.Duration
	next    slog.Handler
}

// OutageHandler wraps next; the returned Outage needs Watch to tell when
// the database is back.
func OutageHandler(next slog.Handler) (slog.Handler, *Outage) {
	o := &Outage{next: next, every: time.Second}
	return outageHandler{next: next, o: o}, o
}

// Watch gives the Outage a way to tell that the database is back (a
// pool's Ping). Without it, an outage is taken to be over after a minute.
func (o *Outage) Watch(ping func(context.Context) error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ping = ping
}

// seen records an unavailable error; it reports whether to log it.
func (o *Outage) seen() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		o.dropped++
		return false
	}
	o.down = true
	o.dropped = 0
	go o.waitForRecovery()
	return true
}

func (o *Outage) waitForRecovery() {
	start := time.Now()
	for {
		time.Sleep(o.every)
		o.mu.Lock()
		ping := o.ping
		o.mu.Unlock()
		if ping == nil {
			if time.Since(start) < time.Minute {
				continue
			}
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := ping(ctx)
			cancel()
			if errors.Is(err, puddle.ErrClosedPool) {
				return // the process is shutting down
			}
			if err != nil {
				continue
			}
		}
		o.mu.Lock()
		dropped := o.dropped
		o.down = false
		o.mu.Unlock()
		r := slog.NewRecord(time.Now(), slog.LevelInfo, "database available again", 0)
		r.AddAttrs(slog.Int("repeated_errors_not_logged", dropped), slog.Duration("outage", time.Since(start).Round(time.Second)))
		_ = o.next.Handle(context.Background(), r)
		return
	}
}

type outageHandler struct {
	next slog.Handler
	o    *Outage
}

func (h outageHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h outageHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && recordUnavailable(r) {
		if !h.o.seen() {
			return nil
		}
		r = r.Clone()
		r.AddAttrs(slog.String("note", "the database is unavailable; errors like this are not logged again until it is back"))
	}
	return h.next.Handle(ctx, r)
}

func (h outageHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return outageHandler{next: h.next.WithAttrs(as), o: h.o}
}

func (h outageHandler) WithGroup(name string) slog.Handler {
	return outageHandler{next: h.next.WithGroup(name), o: h.o}
}

func recordUnavailable(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		switch v := a.Value.Any().(type) {
		case error:
			found = IsUnavailable(v)
		case string:
			found = (a.Key == "err" || a.Key == "error") && looksUnavailable(v)
		}
		return !found
	})
	return found || looksUnavailable(r.Message)
}
