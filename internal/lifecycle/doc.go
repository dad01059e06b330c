// Package lifecycle is the one home of the task and run state machines:
// the states (TaskStatus, RunStatus, AttemptOutcome, Trigger) and the pure
// decisions that move them (what a finished attempt means, the overlap
// policy, the misfire policy, what a replay revives). A decision reads
// only its arguments and returns a plan; the packages that own the
// transactions (internal/run, internal/scheduler, internal/job) apply the plan
// in SQL. docs/lifecycle.md draws the machines and names, for every
// transition, the decision here that makes it and the transaction that
// writes it; TestDiagram walks that list.
//
// No other Go package spells a status: the SQL queries and migrations are
// the only other places the words appear (a partial index needs its
// predicate written out).
package lifecycle
