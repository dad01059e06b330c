-- Fan-out (for_each, docs/dynamic-workflows.md): a step with for_each has
-- one task at the run's insert, its group (fan_out); when it would be
-- released, the transaction that releases it writes one item task per
-- element of its list (group_id, item, item_index; named STEP[i]) and
-- moves the group to expanded, with its counters (items_total,
-- items_open, items_succeeded, items_failed, items_held), which each
-- item's end moves in the transaction of its report. Held items
-- (max_parallel) are waiting items of an expanded group, released lowest
-- index first (tasks_held_items), one per ended item while items_held
-- says some are left.
--
-- Outside a transaction, as 00024: the CHECK is added NOT VALID and then
-- validated; each statement may run again after a crash part way.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS fan_out BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS group_id UUID;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS item JSONB;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS item_index INT;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS items_total INT;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS items_open INT;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS items_succeeded INT;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS items_failed INT;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS items_held INT;
CREATE INDEX IF NOT EXISTS tasks_items ON tasks (group_id, item_index) WHERE group_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_held_items ON tasks (group_id, item_index) WHERE status = 'waiting' AND group_id IS NOT NULL;
ALTER TABLE tasks DROP CONSTRAINT IF EXISTS tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('waiting', 'queued', 'running', 'retrying', 'succeeded', 'failed', 'upstream_failed', 'cancelled', 'dead_lettered', 'skipped', 'expanded')) NOT VALID;
ALTER TABLE tasks VALIDATE CONSTRAINT tasks_status_check;

-- +goose Down
ALTER TABLE tasks DROP CONSTRAINT IF EXISTS tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('waiting', 'queued', 'running', 'retrying', 'succeeded', 'failed', 'upstream_failed', 'cancelled', 'dead_lettered', 'skipped')) NOT VALID;
DROP INDEX IF EXISTS tasks_held_items;
DROP INDEX IF EXISTS tasks_items;
ALTER TABLE tasks DROP COLUMN IF EXISTS items_held;
ALTER TABLE tasks DROP COLUMN IF EXISTS items_failed;
ALTER TABLE tasks DROP COLUMN IF EXISTS items_succeeded;
ALTER TABLE tasks DROP COLUMN IF EXISTS items_open;
ALTER TABLE tasks DROP COLUMN IF EXISTS items_total;
ALTER TABLE tasks DROP COLUMN IF EXISTS item_index;
ALTER TABLE tasks DROP COLUMN IF EXISTS item;
ALTER TABLE tasks DROP COLUMN IF EXISTS group_id;
ALTER TABLE tasks DROP COLUMN IF EXISTS fan_out;
