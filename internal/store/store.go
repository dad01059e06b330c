// Package store is Orrery's access to its state database: the queries
// (written in queries/*.sql, compiled by sqlc into *.gen.go), connection
// pools, and the one way to run a transaction.
package store

import (
	"context"
	"errors"
	"fmt"

	"math/rand/v2"
	"strings"
	"time"

	"github.com/cockroachdb/cockroach-go/v2/crdb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"
)

// DefaultMaxConns is a pool's size unless the URL or Options say
// otherwise. pgx's own default (the number of cores, at least 4) left a
// process that runs the API, a scheduler node and workers to share 4
// connections: a lease renewal could wait behind firing and report
// batches long enough to put the lease at risk. Connections open on
// demand; an idle process holds few.
const DefaultMaxConns = 16

// Options bound a pool.
type Options struct {
	// MaxConns bounds the pool; 0: the URL's pool_max_conns, else
	// DefaultMaxConns.
	MaxConns int32
	// IdleInTx ends a session that sits idle inside a transaction this long
	// (idle_in_transaction_session_timeout, which CockroachDB has too): the
	// server rolls the transaction back and closes the session. A process
	// stopped mid-transaction (SIGSTOP, a debugger, a paused VM) then cannot
	// keep its row locks, such as the shard fence a claim must skip, past
	// its leases. Orrery's transactions never wait on their client for
	// long. 0: no bound.
	IdleInTx time.Duration
}

// Open connects a pool to the database at dsn and checks it answers.
func Open(ctx context.Context, dsn string, opts Options) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: bad database URL: %w", err)
	}
	switch {
	case opts.MaxConns > 0:
		cfg.MaxConns = opts.MaxConns
	case !strings.Contains(dsn, "pool_max_conns"):
		cfg.MaxConns = DefaultMaxConns
	}
	if opts.IdleInTx > 0 {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(opts.IdleInTx.Milliseconds())
	}
	cfg.AfterConnect = RegisterTypes
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: cannot reach the database: %w", err)
	}
	return pool, nil
}

// RegisterTypes teaches a connection to send and read google/uuid values
// as binary UUIDs. Without it pgx encodes every uuid.UUID (alone or in an
// array) by first failing its binary plans, building an error for each,
// then falling back to the value's text form: a quarter of the engine's
// CPU in the storm benchmark.
func RegisterTypes(_ context.Context, conn *pgx.Conn) error {
	pgxuuid.Register(conn.TypeMap())
	return nil
}

// InTx runs fn in one transaction and commits it, retrying the whole
// transaction on serialization failures (SQLSTATE 40001, as CockroachDB
// and serializable PostgreSQL raise them, at any statement or at COMMIT)
// and deadlocks; fn must be safe to run again.
//
// Isolation is the database's default. Orrery's transactions take the row
// locks their logic needs (FOR UPDATE on the rows they decide about, FOR
// KEY SHARE on the shards they fence with), so they are correct under READ
// COMMITTED as well as SERIALIZABLE: CockroachDB runs them serializable,
// the tests run PostgreSQL serializable, and a PostgreSQL of your own may
// stay at its READ COMMITTED default (see BENCHMARKS.md for why it should).
//
// It uses cockroach-go's retry loop (crdb.ExecuteCtx) around a fresh
// transaction per attempt, not crdbpgxv5.ExecuteTx: that one retries by
// ROLLBACK TO SAVEPOINT cockroach_restart, which on PostgreSQL keeps the
// snapshot that failed (so every retry fails again), and it ignores the
// COMMIT's error, because on CockroachDB RELEASE SAVEPOINT is the commit;
// on PostgreSQL a commit-time serialization failure would then be
// acknowledged as success. Both are shown by TestInTx*.
func InTx(ctx context.Context, pool *pgxpool.Pool, fn func(q *Queries) error) error {
	return InRawTx(ctx, pool, func(tx pgx.Tx) error { return fn(New(tx)) })
}

// Retry runs fn again on serialization failures, for work that is a single
// statement (an implicit transaction) or that manages its own transaction.
func Retry(ctx context.Context, fn func() error) error {
	return crdb.ExecuteCtx(ctx, func(context.Context, ...any) error { return fn() })
}

// InRawTx is InTx for code that needs the pgx.Tx itself (River's
// InsertManyTx, tests).
func InRawTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	attempt := 0
	return crdb.ExecuteCtx(ctx, func(ctx context.Context, _ ...any) error {
		if attempt > 0 {
			// Full jitter, so that transactions that collided do not collide
			// again, over a window that grows 2 ms an attempt up to 16 ms
			// (the common collision, retried at once), then doubles to
			// 256 ms, so that one that keeps colliding with a stream of
			// others waits for a lull: 16 ms at most gave up after 50 tries
			// within half a second (a trigger beside a busy engine, under
			// the tests' SERIALIZABLE); now they span about five seconds.
			window := time.Duration(min(attempt, 8)) * 2 * time.Millisecond
			if attempt > 8 {
				window <<= min(attempt-8, 4)
			}
			backoff := time.Duration(rand.Int64N(int64(window)))
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		attempt++
		raw, err := pool.BeginTx(ctx, pgx.TxOptions{})
		if err != nil {
			return beforeCommit(err, attempt)
		}
		tx := &hookedTx{Tx: raw}
		err = fn(tx)
		for i := 0; err == nil && i < len(tx.beforeCommit); i++ {
			err = tx.beforeCommit[i](ctx)
		}
		for i := 0; err == nil && i < len(tx.last); i++ {
			err = tx.last[i](ctx)
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			return beforeCommit(err, attempt)
		}
		if err := tx.Commit(ctx); err != nil {
			return asRetryable(err)
		}
		for _, f := range tx.onCommit {
			f()
		}
		return nil
	})
}

// hookedTx is the transaction InRawTx hands out: it runs the functions
// given to OnCommit once it has committed.
type hookedTx struct {
	pgx.Tx
	onCommit     []func()
	beforeCommit []func(context.Context) error
	last         []func(context.Context) error // after beforeCommit's
	values       map[string]any
}

// BeforeCommit runs fn just before tx commits, when tx comes from InRawTx
// (an error rolls it back); with another tx, at once. What a transaction
// writes to rows many transactions share (counters), it writes there:
// once, last, holding their locks the shortest time.
func BeforeCommit(ctx context.Context, tx pgx.Tx, fn func(context.Context) error) error {
	if h, ok := tx.(*hookedTx); ok {
		h.beforeCommit = append(h.beforeCommit, fn)
		return nil
	}
	return fn(ctx)
}

// BeforeCommitLast is BeforeCommit after every BeforeCommit function: for
// locks a transaction must take after all its others (the step keys'
// advisory locks, in one batch in key order, so that no two transactions
// wait on each other's).
func BeforeCommitLast(ctx context.Context, tx pgx.Tx, fn func(context.Context) error) error {
	if h, ok := tx.(*hookedTx); ok {
		h.last = append(h.last, fn)
		return nil
	}
	return fn(ctx)
}

// TxValue is the value kept on tx under key, made by init the first time
// (fresh says it was); with a tx not from InRawTx, always fresh.
func TxValue(tx pgx.Tx, key string, init func() any) (v any, fresh bool) {
	h, ok := tx.(*hookedTx)
	if !ok {
		return init(), true
	}
	if v, ok := h.values[key]; ok {
		return v, false
	}
	if h.values == nil {
		h.values = map[string]any{}
	}
	v = init()
	h.values[key] = v
	return v, true
}

// OnCommit runs fn after tx commits, when tx comes from InTx or InRawTx
// (not at all if it rolls back; a retried transaction keeps only the
// functions of the try that committed); with any other transaction, at
// once. Work that must see the transaction's rows (waking an admitter)
// goes here.
func OnCommit(tx pgx.Tx, fn func()) {
	if h, ok := tx.(*hookedTx); ok {
		h.onCommit = append(h.onCommit, fn)
		return
	}
	fn()
}

// lostRetries is how many times a transaction whose session was lost before
// COMMIT is run again.
const lostRetries = 3

// beforeCommit classifies an error raised before COMMIT was sent: nothing
// was committed, so a transaction whose session was lost (the server ended
// it for idling inside a transaction, SQLSTATE 25P03, or the connection
// broke) can safely run again on another connection, a few times. An error
// of COMMIT itself is ambiguous and never retried this way.
func beforeCommit(err error, attempt int) error {
	var pe *pgconn.PgError
	lost := (errors.As(err, &pe) && pe.Code == "25P03") || (IsUnavailable(err) && !errors.As(err, &pe))
	if lost && attempt <= lostRetries {
		return retryableError{err}
	}
	return asRetryable(err)
}

// asRetryable makes a deadlock (SQLSTATE 40P01), which PostgreSQL resolves
// by aborting one of the transactions, retry like a serialization failure.
func asRetryable(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "40P01" {
		return retryableError{err}
	}
	return err
}

type retryableError struct{ error }

func (e retryableError) Unwrap() error    { return e.error }
func (e retryableError) SQLState() string { return "40001" }

// IsUniqueViolation reports whether err is a unique-constraint violation,
// on the named constraint or index when constraint is not empty.
func IsUniqueViolation(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && (constraint == "" || pe.ConstraintName == constraint)
}

// IsForeignKeyViolation reports whether err is a foreign-key violation,
// on the named constraint when constraint is not empty.
func IsForeignKeyViolation(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503" && (constraint == "" || pe.ConstraintName == constraint)
}

// IsLockTimeout reports whether err is a statement that gave up waiting
// for a lock (lock_timeout).
func IsLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// IsServerError reports whether err is an error the database reported for
// a statement (which then changed nothing), rather than one whose outcome
// is unknown: a connection lost, a deadline passed, or an error the server
// sends when it cannot tell either: CockroachDB's "result is ambiguous"
// (40003, at a commit), a connection exception (class 08), the server
// shutting down or crashing (57P01, 57P02, 57P03).
func IsServerError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && !IsAmbiguous(err) && !sessionEnded(pe.Code)
}

// IsAmbiguous reports whether err is the database saying it cannot tell
// whether a commit took effect (CockroachDB's "result is ambiguous",
// 40003): the change may or may not be there.
func IsAmbiguous(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40003"
}

// IsNotFound reports whether err is a query that returned no row.
func IsNotFound(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
