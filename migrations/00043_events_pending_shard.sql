-- The probe before a transaction of the events step asks whether the
-- node's shards have pending events ready: an index by shard, so that it
-- does not read the pending events of other nodes' shards.

-- +goose Up
CREATE INDEX events_pending_shard ON events (shard, retry_at) WHERE pending;

-- +goose Down
DROP INDEX events_pending_shard;
