-- The events step takes pending events tenant by tenant (a few of each in
-- a batch), so that one tenant's flood does not hold up another's events:
-- the pending events by tenant, oldest first (the id breaks ties, as the
-- step orders them).

-- +goose Up
DROP INDEX events_pending;
CREATE INDEX events_pending ON events (tenant_id, received_at, id) WHERE pending;

-- +goose Down
DROP INDEX events_pending;
CREATE INDEX events_pending ON events (shard, received_at) WHERE pending;
