-- Step-level concurrency keys (docs/flow-control.md, "Step level"): a keyed
-- step's task carries its keys' values (flow_keys, the tenant's: every job
-- naming a value shares it) and each one's limit (flow_limits), written
-- at its release. It holds them from then (status queued, running or
-- retrying, flow_wait NULL) until it ends. One released at a key's limit
-- is held: status queued, flow_wait the key it waits for, ready_at
-- NULL (no admission query reads it, as a waiting task's), until an end of that key
-- promotes it.
--
-- tasks_flow_keys counts a key's holders (at most its limits: a probe a
-- key, whatever waits); tasks_flow_wait reads a key's held tasks oldest
-- first (a range read of the room, whatever waits). tasks_admission
-- leaves the held tasks out (ready_at NULL), so that the admission's
-- looks ("does anything wait in this queue?") do not walk them.

-- +goose Up
ALTER TABLE tasks ADD COLUMN flow_keys TEXT[];
ALTER TABLE tasks ADD COLUMN flow_limits INT[];
ALTER TABLE tasks ADD COLUMN flow_wait TEXT;
CREATE INDEX tasks_flow_keys ON tasks USING GIN (flow_keys)
    WHERE flow_keys IS NOT NULL AND flow_wait IS NULL AND status IN ('queued', 'running', 'retrying');
CREATE INDEX tasks_flow_wait ON tasks (tenant_id, flow_wait, id)
    WHERE flow_wait IS NOT NULL AND status = 'queued';
DROP INDEX tasks_admission;
CREATE INDEX tasks_admission ON tasks (queue, tenant_id, priority, ready_at)
    WHERE admitted_at IS NULL AND status IN ('queued', 'retrying') AND ready_at IS NOT NULL;

-- +goose Down
DROP INDEX tasks_admission;
CREATE INDEX tasks_admission ON tasks (queue, tenant_id, priority, ready_at)
    WHERE admitted_at IS NULL AND status IN ('queued', 'retrying');
DROP INDEX tasks_flow_wait;
DROP INDEX tasks_flow_keys;
ALTER TABLE tasks DROP COLUMN flow_wait;
ALTER TABLE tasks DROP COLUMN flow_limits;
ALTER TABLE tasks DROP COLUMN flow_keys;
