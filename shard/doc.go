// Package shard divides the job space among scheduler nodes.
//
// Of gives a job's shard: one of the cluster's N hash shards, fixed at
// cluster init (this file imports nothing of Orrery's). A Manager keeps a
// node registered under a lease and owning an even share of the shards,
// each under a lease with an epoch that every claim bumps. Work done for a
// shard checks, inside its own transaction, that the node still holds the
// shard at the epoch it claimed (the scheduler's fence, a FOR KEY SHARE
// read of the shard rows): a node that lost a shard while paused writes
// nothing for it.
//
// # A node stopped inside a transaction
//
// The fence's FOR KEY SHARE lock lasts until the firing transaction ends,
// and a claim (FOR UPDATE SKIP LOCKED) skips a locked row. So a node
// stopped inside its firing transaction (SIGSTOP, a debugger, a paused VM)
// would keep its shards from every other node for as long as it stays
// stopped, lease or no lease. Orrery bounds the transaction instead of
// changing the lock: every pool of a node sets PostgreSQL's (and
// CockroachDB's) idle_in_transaction_session_timeout to half the shortest
// lease TTL (orrery serve --idle-tx-timeout; store.Options.IdleInTx), so
// the server rolls a stopped transaction back and drops its locks well
// before the shard lease lapses; the shard is claimed at the next heartbeat
// of another node after the lease lapses. Taking no lock in the fence
// (checking the epoch with a plain read) would have left a window where a
// claim and a firing transaction both proceed; the lock is what makes the
// epoch check hold until commit.
package shard
