-- Event sources: signed webhooks a tenant admin defines (docs/events.md).

-- name: InsertSource :one
INSERT INTO event_sources (id, tenant_id, name, namespace, kind, secret)
VALUES (@id, @tenant_id, @name, @namespace, @kind, @secret)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING *;

-- name: CountSources :one
SELECT count(*)::bigint FROM event_sources WHERE tenant_id = @tenant_id;

-- name: ListSources :many
SELECT * FROM event_sources WHERE tenant_id = @tenant_id ORDER BY name LIMIT 1000;

-- name: DeleteSource :one
DELETE FROM event_sources WHERE tenant_id = @tenant_id AND name = @name RETURNING *;

-- HookSource reads the source a delivery names, by its tenant's name and
-- its own: one index probe each, and nothing written.
-- name: HookSource :one
SELECT s.*, t.name AS tenant_name FROM event_sources AS s JOIN tenants AS t ON t.id = s.tenant_id
WHERE t.name = @tenant_name AND s.name = @name;
