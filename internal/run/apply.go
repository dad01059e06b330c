package run

import (
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/store"
)

// Applier writes what the lifecycle's decisions (internal/lifecycle) make
// of runs and tasks, in the caller's transaction: the rows, the releases
// of tasks to their worker pools through its Dispatcher (each built by
// dispatch.NextAttempt), and, once the transaction commits
// (store.OnCommit), the runs it finished in its Metrics. The scheduler,
// the reaper, the worker and the Service call it.
type Applier struct {
	Dispatcher *dispatch.Dispatcher
	Metrics    *metrics.Metrics // nil: none
	Failpoints *failpoint.Set   // nil: none
}

// FailpointConditionsDecided is hit in the transaction that releases
// tasks, after their conditions are decided and before any is written.
const FailpointConditionsDecided = "run/conditions-decided"

// finished counts a run that tx ends with status, once tx commits.
func (a *Applier) finished(tx pgx.Tx, status lifecycle.RunStatus) {
	if a.Metrics == nil {
		return
	}
	store.OnCommit(tx, func() { a.Metrics.RunFinished(string(status)) })
}

// applying is one transaction's writing of what the lifecycle decides:
// the Applier, the transaction and its queries. The cascade of an ended
// attempt (its run's end, the release of what waited on it, conditions,
// fan-outs, job steps, the failures that settle below it) is its methods,
// each writing in tx; a reader follows a report from Applier.Finish down
// through them.
type applying struct {
	*Applier
	tx pgx.Tx
	q  *store.Queries
}

// in is a's writing in tx.
func (a *Applier) in(tx pgx.Tx) *applying {
	return &applying{Applier: a, tx: tx, q: store.New(tx)}
}
