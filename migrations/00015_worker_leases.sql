-- A running task's lease is its worker's (see package worker): the task
-- records the worker process it runs on (tasks.worker_id, the workers row
-- and River client id), and it lapses when that worker's lease lapses. A
-- worker renews one row per beat, whatever it runs; before, it rewrote
-- every running task's row (and its index entries) at every beat.
-- tasks_running_worker finds a worker's running tasks (for the reaper once
-- its lease lapsed, and for the worker's own check of what is still its,
-- from the index alone); tasks_lease (lease_expires_at of running tasks)
-- goes.

-- +goose Up
ALTER TABLE tasks ADD COLUMN worker_id UUID;
CREATE INDEX tasks_running_worker ON tasks (worker_id) INCLUDE (id, fencing_token) WHERE status = 'running';
DROP INDEX tasks_lease;

-- +goose Down
CREATE INDEX tasks_lease ON tasks (lease_expires_at) WHERE status = 'running';
DROP INDEX tasks_running_worker;
ALTER TABLE tasks DROP COLUMN worker_id;
