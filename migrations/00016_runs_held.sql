-- A run's start (pending -> running) changes its status and started_at
-- only, and 00004 left room on each page for that update to be HOT (no
-- index entry written). runs_queued (00005) put status in an index
-- predicate, which made every start write an entry in each of the runs'
-- indexes. held, computed from status (so nodes that do not know it keep
-- it right), is true only for a run that overlap: queue holds back; a
-- start leaves it false, and runs_held finds a job's held runs as
-- runs_queued did. Outside a transaction, each statement re-runnable:
-- CockroachDB does not let one transaction use a column it added.

-- +goose NO TRANSACTION

-- +goose Up
ALTER TABLE runs ADD COLUMN IF NOT EXISTS held BOOLEAN GENERATED ALWAYS AS (status = 'queued') STORED;
CREATE INDEX IF NOT EXISTS runs_held ON runs (job_id, scheduled_for) WHERE held AND finished_at IS NULL;
-- IF EXISTS: 00005 gained runs_queued after some databases had applied it.
DROP INDEX IF EXISTS runs_queued;

-- +goose Down
CREATE INDEX IF NOT EXISTS runs_queued ON runs (job_id) WHERE status = 'queued';
DROP INDEX IF EXISTS runs_held;
ALTER TABLE runs DROP COLUMN IF EXISTS held;
