-- A tenant's quotas in resources (docs/resources.md): what its admitted
-- tasks ask for together, in all queues, never passes them. A JSON vector
-- ({"cpu": millicores, "memory": bytes, "gpu": n, "custom": {"name": n}});
-- a resource it leaves out has no quota; NULL: none at all.

-- +goose Up
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_resources JSONB;

-- +goose Down
ALTER TABLE tenants DROP COLUMN IF EXISTS max_resources;
