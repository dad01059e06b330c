-- Conditions (docs/workflows.md): a step whose `when` is false is
-- skipped, and skipping flows to its children by trigger rule. A task
-- records whether its step has a condition (conditional), so that a
-- release reads the job's spec only for those.
--
-- Outside a transaction, so that the new CHECK is added NOT VALID (a
-- moment's lock) and then validated under a lock that lets writers go on;
-- every statement may run again after a crash part way.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS conditional BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE tasks DROP CONSTRAINT IF EXISTS tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('waiting', 'queued', 'running', 'retrying', 'succeeded', 'failed', 'upstream_failed', 'cancelled', 'dead_lettered', 'skipped')) NOT VALID;
ALTER TABLE tasks VALIDATE CONSTRAINT tasks_status_check;

-- +goose Down
ALTER TABLE tasks DROP CONSTRAINT IF EXISTS tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('waiting', 'queued', 'running', 'retrying', 'succeeded', 'failed', 'upstream_failed', 'cancelled', 'dead_lettered')) NOT VALID;
ALTER TABLE tasks DROP COLUMN IF EXISTS conditional;
