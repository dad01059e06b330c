// Package job manages job definitions: create, read, list, update, pause,
// resume and delete, each one transaction that also writes its audit row
// (invariant 6, docs/invariants.md) and computes the job's next fire time from the
// database clock.
//
// Transaction boundaries:
//
//   - createJob: idempotency-key lookup, namespace, job row, version 1,
//     audit "create", idempotency-key row. All or nothing.
//   - updateJob: row lock, expected-version check, new version row, next fire
//     time (recomputed when the schedule changed), audit "update".
//   - setJobStatus (pause, resume, delete): row lock, status, next fire time
//     (resume follows the misfire policy), audit.
//
// Pause, resume and delete do not bump the version: the version numbers
// definitions, which runs pin; status is not part of the definition.
//
// Files: service.go (the Service, refs, the checks and audit every write
// shares), create.go, change.go (update, pause, resume, delete), read.go
// (get, lock, list, history), apply.go (a set of YAML files applied as
// one change), job.go (the Job as the API shows it), errors.go.
package job
