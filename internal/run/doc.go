// Package run writes the task and run life that internal/lifecycle decides,
// and serves the run history.
//
// The Applier (apply.go) writes, in its caller's transaction:
//
//   - create.go: runs and their tasks (a firing, a trigger), cancellation;
//   - start.go: an attempt's start (the task running on a worker, with a
//     new fencing token, its attempt on record before the step runs);
//   - finish.go: an attempt's end, as lifecycle.FinishAttempt decides,
//     and the run's end with its last task;
//   - release.go: the children a finished task releases, and the
//     descendants a failure fails upstream;
//   - held.go: the run overlap: queue held back, started when its job's
//     active run ends;
//   - expire.go: attempts whose worker's lease lapsed (the reaper);
//   - redeliver.go: River jobs of a lapsed worker handed out again;
//   - replay.go: dead letters replayed, as lifecycle.Replay decides.
//
// The Service (service.go) serves the API: list, get, trigger, cancel, the
// dead-letter list and replay.
package run
