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
package job
