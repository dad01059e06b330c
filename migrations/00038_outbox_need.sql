-- What an outbox row's task asks for and whether the worker's gate
-- reserves for it at once (docs/resources.md): carried to the River job as
-- the direct insert carries them (TaskArgs.Need, TaskArgs.Reserve), so
-- that a worker behind the outbox neither reads each task's size nor
-- waits its own reservation for a large task admission reserved for.
-- NULL need: not known (the worker reads it).

-- +goose Up
ALTER TABLE dispatch_outbox ADD COLUMN IF NOT EXISTS need JSONB;
ALTER TABLE dispatch_outbox ADD COLUMN IF NOT EXISTS reserve BOOLEAN NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE dispatch_outbox DROP COLUMN IF EXISTS reserve;
ALTER TABLE dispatch_outbox DROP COLUMN IF EXISTS need;
