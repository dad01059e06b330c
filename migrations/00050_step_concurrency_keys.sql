-- Step-level concurrency keys (docs/flow-control.md, "Step level"): a keyed
-- step's task carries its keys' values (flow_keys, the tenant's: every job
-- naming a value shares it) and each one's limit (flow_limits), written
-- at its release. It holds them from then (status queued, running or
-- retrying, flow_wait NULL) until it ends. One released at a key's limit
-- is held: status waiting (no admission, start or offer reads it), with
-- no parent left, flow_wait the key it waits for, until a promotion
-- releases it (queued).
--
-- tasks_flow_keys counts a key's holders (at most its limits: a probe a
-- key, whatever waits); tasks_flow_wait reads a key's held tasks oldest
-- first (a range read of the room, whatever waits).

-- +goose Up
ALTER TABLE tasks ADD COLUMN flow_keys TEXT[];
ALTER TABLE tasks ADD COLUMN flow_limits INT[];
ALTER TABLE tasks ADD COLUMN flow_wait TEXT;
CREATE INDEX tasks_flow_keys ON tasks USING GIN (flow_keys)
    WHERE flow_keys IS NOT NULL AND flow_wait IS NULL AND status IN ('queued', 'running', 'retrying');
CREATE INDEX tasks_flow_wait ON tasks (tenant_id, flow_wait, id)
    WHERE flow_wait IS NOT NULL AND status = 'waiting';

-- +goose Down
DROP INDEX tasks_flow_wait;
DROP INDEX tasks_flow_keys;
ALTER TABLE tasks DROP COLUMN flow_wait;
ALTER TABLE tasks DROP COLUMN flow_limits;
ALTER TABLE tasks DROP COLUMN flow_keys;
