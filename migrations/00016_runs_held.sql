-- A run's start (pending -> running) changes its status and started_at
-- only, and 00004 left room on each page for that update to be HOT (no
-- index entry written). runs_queued (00005) put status in an index
-- predicate, which made every start write an entry in each of the runs'
-- eight indexes. A run that overlap: queue holds back is marked held
-- instead, a column that changes only when it is promoted (rare), and
-- runs_held finds a job's held runs as runs_queued did.

-- +goose Up
ALTER TABLE runs ADD COLUMN held BOOLEAN NOT NULL DEFAULT false;
UPDATE runs SET held = true WHERE status = 'queued';
CREATE INDEX runs_held ON runs (job_id, scheduled_for) WHERE held AND finished_at IS NULL;
-- IF EXISTS: 00005 gained runs_queued after some databases had applied it.
DROP INDEX IF EXISTS runs_queued;

-- +goose Down
CREATE INDEX runs_queued ON runs (job_id) WHERE status = 'queued';
DROP INDEX runs_held;
ALTER TABLE runs DROP COLUMN held;
