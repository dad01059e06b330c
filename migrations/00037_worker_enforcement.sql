-- How a worker process holds its command steps to the resources they ask
-- for (docs/resources.md, "Enforcement"), written when it registers (a
-- process registers once, under an id of its own), for the cluster page: "memory, cpu" (by cgroup), "memory", or "none" (a
-- reservation only). NULL: it runs no command steps (a gateway, or a
-- worker without --allow-command), or it is a remote worker.

-- +goose Up
ALTER TABLE workers ADD COLUMN IF NOT EXISTS enforces TEXT;

-- +goose Down
ALTER TABLE workers DROP COLUMN IF EXISTS enforces;
