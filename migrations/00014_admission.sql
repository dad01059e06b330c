-- Admission (see package dispatch): a released task waits in the tasks
-- table until an admitter hands it to River.
--
-- tasks.ready_at is when the task's current wait began (its release, a
-- replay, or the end of a retry's backoff: it is not eligible before);
-- tasks.admitted_at is set when an admitter inserted its River job, and
-- cleared when the attempt ends. A task is
--   waiting for admission: status queued or retrying, admitted_at NULL;
--   in flight (holding a slot): status queued, retrying or running,
--                               admitted_at set.
-- tasks_admission orders the first per (queue, tenant, priority) by wait;
-- tasks_in_flight counts the second per (queue, tenant). Both stay as
-- small as the backlog and the running work.
--
-- queues has one row per queue an admitter served: the row an admission
-- pass locks, so that one admitter at a time decides for a queue.
-- tenant_queue_quotas caps one tenant's in-flight tasks in one queue.

-- +goose Up
ALTER TABLE tasks ADD COLUMN ready_at TIMESTAMPTZ;
ALTER TABLE tasks ADD COLUMN admitted_at TIMESTAMPTZ;
-- Tasks already handed to River before this migration are in flight.
UPDATE tasks SET ready_at = COALESCE(released_at, created_at), admitted_at = COALESCE(released_at, created_at)
WHERE status IN ('queued', 'running', 'retrying');
CREATE INDEX tasks_admission ON tasks (queue, tenant_id, priority, ready_at)
    WHERE admitted_at IS NULL AND status IN ('queued', 'retrying');
CREATE INDEX tasks_in_flight ON tasks (queue, tenant_id)
    WHERE admitted_at IS NOT NULL AND status IN ('queued', 'running', 'retrying');

CREATE TABLE queues (
    name       TEXT PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE tenant_queue_quotas (
    tenant_id       UUID NOT NULL REFERENCES tenants (id),
    queue           TEXT NOT NULL,
    max_concurrency INT NOT NULL CHECK (max_concurrency > 0),
    PRIMARY KEY (tenant_id, queue)
);

-- +goose Down
DROP TABLE tenant_queue_quotas;
DROP TABLE queues;
DROP INDEX tasks_in_flight;
DROP INDEX tasks_admission;
ALTER TABLE tasks DROP COLUMN admitted_at;
ALTER TABLE tasks DROP COLUMN ready_at;
