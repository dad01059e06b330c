package crdbparse

// Exception is a statement Orrery sends that CockroachDB's parser rejects,
// let through on purpose. Each one says how the statement behaves on
// CockroachDB.
type Exception struct {
	File string // path relative to the repository root
	// Query is the sqlc query name, or for a migration statement its text
	// with runs of whitespace folded to one space and no trailing ';'.
	Query string
	// CockroachDB is how the statement behaves on CockroachDB.
	CockroachDB string
	// Fix is set when the statement fails on CockroachDB (rather than being
	// harmless there, e.g. a storage parameter CockroachDB would ignore or
	// a statement skipped on CockroachDB) and says how to make it portable.
	// Such an entry is printed as KNOWN BROKEN on every run; it is a debt,
	// not a permanent exception.
	Fix string
}

// Exceptions is the allow-list. An entry that matches no failing statement
// (the statement was fixed or renamed, or the parser now accepts it) fails
// the check, so the list never outlives its reasons. A failing statement
// not listed here fails the check too.
//
// Statements that parse but behave differently on CockroachDB are not
// listed; for the record:
//
//   - migrations/00004_fewer_index_writes.sql, ALTER TABLE runs|attempts
//     SET (fillfactor = 70) (and RESET (fillfactor) in its Down section):
//     CockroachDB accepts the fillfactor storage parameter for PostgreSQL
//     compatibility and ignores it; there are no heap pages or HOT updates
//     on its storage.
//   - FOR KEY SHARE (shard/queries/lease.sql, Fence): parsed by
//     CockroachDB, which has no key-share lock strength of its own and
//     locks as for FOR SHARE.
//   - now() + INTERVAL '1 second' * @ttl_seconds::float8 (the lease
//     queries): written this way because CockroachDB's grammar has no
//     named-argument notation (make_interval(secs => ...) does not parse
//     there), and sqlc mis-edits a parameter followed by '*'.
var Exceptions = []Exception{}
