// Package run writes the task and run life that internal/lifecycle decides,
// and serves the run history.
//
// The Applier (apply.go) writes in its caller's transaction. Each of its
// entries makes an applying (apply.go: the Applier, the transaction and
// its queries) whose methods are the cascade an entry sets off, so that a
// reader follows a report from Applier.Finish (finish.go) down through
// them. By file:
//
//   - apply.go: the Applier and applying;
//   - create.go: runs and their tasks (a firing, a trigger), held to the
//     tenants' storage quotas; resources.go: the resources a run pins;
//     tree.go: the trees of runs (a child's, an after-trigger's) and
//     their bound;
//   - start.go: an attempt's start (the task running on a worker, with a
//     new fencing token, its attempt on record in the task's row before
//     the step runs; the attempts row is written at its end);
//     vars.go: what the expressions of a step read;
//   - finish.go: Finish, the one way an attempt's end is written (a
//     worker's, a remote worker's, the reaper's, a job step's), as
//     lifecycle.FinishAttempt decides, and the run's end with its last
//     task;
//   - release.go: the children a finished task releases, and the
//     descendants a failure fails upstream (propagate);
//     condition.go: the conditions (when) decided at release;
//     fanout.go: fan-outs (for_each) expanded at release, their items'
//     ends counted; calls.go, callstart.go: job steps (run.job) and
//     their child runs;
//   - held.go: the run overlap: queue held back, started when its job's
//     active run ends;
//   - cancel.go: cancellation, with the child runs below;
//   - expire.go: attempts whose worker's lease lapsed (the reaper);
//   - redeliver.go: River jobs of a lapsed worker handed out again;
//   - remote.go: remote workers' offers, claims, heartbeats and reports;
//   - replay.go: dead letters replayed, as lifecycle.Replay decides;
//     retry.go: a run retried from its failed step, or run again;
//   - backfill.go: backfills, fired a range of instants at a time;
//   - spec.go: the cache of job versions' parsed specs.
//
// The Service (service.go) serves the API: list, get, trigger, cancel, the
// dead-letter list and replay; summary.go the overview's window.
package run
