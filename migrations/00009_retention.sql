-- Retention: finished runs (with their tasks and attempts) older than a
-- retention are pruned by each scheduler node for the shards it holds.
-- runs_finished finds them by shard and age; tenants.run_retention_seconds
-- overrides the default per tenant (NULL: the default).

-- +goose Up
ALTER TABLE tenants ADD COLUMN run_retention_seconds BIGINT CHECK (run_retention_seconds > 0);
CREATE INDEX runs_finished ON runs (shard, finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP INDEX runs_finished;
ALTER TABLE tenants DROP COLUMN run_retention_seconds;
