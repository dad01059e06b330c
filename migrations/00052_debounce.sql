-- Debounce (docs/flow-control.md, "Debounce"): a trigger of a job with
-- spec.debounce writes its run queued and debouncing, with debounce_key
-- (the key's value, '' for a job without one) and debounce_at (when it
-- starts, unless a later trigger of its key puts it off); a later
-- trigger of the key finds it (runs_debounce_open: one debouncing run a
-- job and key value) and gives it its params, event and a later
-- debounce_at, counting itself in debounce_count. The scheduler of the
-- run's shard starts the due ones (runs_debounce_due), clearing
-- debouncing (debounce_at stays: when it started); the run then is a run
-- as any other (its overlap policy and keys decide it). A cancel clears
-- debouncing too. The indexes' predicates name debouncing, not status,
-- so that a run's start stays a HOT update (00016).

-- +goose Up
ALTER TABLE runs ADD COLUMN debounce_key TEXT;
ALTER TABLE runs ADD COLUMN debounce_at TIMESTAMPTZ;
ALTER TABLE runs ADD COLUMN debounce_count INT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN debouncing BOOLEAN NOT NULL DEFAULT false;
CREATE UNIQUE INDEX runs_debounce_open ON runs (job_id, debounce_key) WHERE debouncing;
CREATE INDEX runs_debounce_due ON runs (shard, debounce_at) WHERE debouncing;

-- +goose Down
DROP INDEX IF EXISTS runs_debounce_due;
DROP INDEX IF EXISTS runs_debounce_open;
ALTER TABLE runs DROP COLUMN IF EXISTS debouncing;
ALTER TABLE runs DROP COLUMN IF EXISTS debounce_count;
ALTER TABLE runs DROP COLUMN IF EXISTS debounce_at;
ALTER TABLE runs DROP COLUMN IF EXISTS debounce_key;
