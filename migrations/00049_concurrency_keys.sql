-- Job-level concurrency keys (docs/flow-control.md): a run's keys, each
-- JOB/ENTRY/VALUE (its job's id, the index of its spec.concurrency entry,
-- the key's value), evaluated when the run is written. A run holds them
-- while it is pending or running; the holders of a key are counted, and
-- the runs queued for one found, through runs_concurrency_keys, which
-- holds the runs not finished only: a probe a key, whatever the job's
-- history.

-- +goose Up
ALTER TABLE runs ADD COLUMN concurrency_keys TEXT[];
CREATE INDEX runs_concurrency_keys ON runs USING GIN (concurrency_keys) WHERE finished_at IS NULL AND concurrency_keys IS NOT NULL;

-- +goose Down
DROP INDEX runs_concurrency_keys;
ALTER TABLE runs DROP COLUMN concurrency_keys;
