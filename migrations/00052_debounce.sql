-- Debounce (docs/flow-control.md, "Debounce"): a trigger of a job with
-- spec.debounce writes its run queued with debounce_key (the key's value,
-- '' for a job without one) and debounce_at (when it starts, unless a
-- later trigger of its key puts it off); a later trigger of the key finds
-- it (runs_debounce_open: one such run a job and key value) and gives it
-- its params, event and a later debounce_at, counting itself in
-- debounce_count. The scheduler of the run's shard starts the due ones
-- (runs_debounce_due), clearing debounce_at: the run then is a run
-- as any other (its overlap policy and keys decide it).

-- +goose Up
ALTER TABLE runs ADD COLUMN debounce_key TEXT;
ALTER TABLE runs ADD COLUMN debounce_at TIMESTAMPTZ;
ALTER TABLE runs ADD COLUMN debounce_count INT NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX runs_debounce_open ON runs (job_id, debounce_key) WHERE debounce_at IS NOT NULL AND status = 'queued';
CREATE INDEX runs_debounce_due ON runs (shard, debounce_at) WHERE debounce_at IS NOT NULL AND status = 'queued';

-- +goose Down
DROP INDEX IF EXISTS runs_debounce_due;
DROP INDEX IF EXISTS runs_debounce_open;
ALTER TABLE runs DROP COLUMN IF EXISTS debounce_count;
ALTER TABLE runs DROP COLUMN IF EXISTS debounce_at;
ALTER TABLE runs DROP COLUMN IF EXISTS debounce_key;
