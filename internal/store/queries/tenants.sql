-- name: TenantByName :one
SELECT id FROM tenants WHERE name = @name;

-- name: InsertTenant :exec
INSERT INTO tenants (id, name, max_jobs, max_definition_bytes, max_runs, max_tasks, max_history_bytes)
VALUES (@id, @name, @max_jobs, @max_definition_bytes, @max_runs, @max_tasks, @max_history_bytes);

-- ListTenants pages through every tenant by name: those after @after.
-- name: ListTenants :many
SELECT id, name, weight, max_concurrency, created_at FROM tenants
WHERE name > @after
ORDER BY name
LIMIT @page_size;

-- name: LockTenantByName :one
SELECT id, name, weight, max_concurrency, created_at, max_items_per_step, max_runs_per_tree, max_resources FROM tenants WHERE name = @name FOR NO KEY UPDATE;

-- name: SetTenantLimits :exec
UPDATE tenants SET weight = @weight, max_concurrency = @max_concurrency, max_items_per_step = @max_items_per_step, max_runs_per_tree = @max_runs_per_tree,
    max_resources = sqlc.narg(max_resources)::jsonb
WHERE id = @id;

-- name: TenantQueueQuotas :many
SELECT queue, max_concurrency FROM tenant_queue_quotas WHERE tenant_id = @tenant_id ORDER BY queue;

-- name: SetTenantQueueQuota :exec
INSERT INTO tenant_queue_quotas (tenant_id, queue, max_concurrency) VALUES (@tenant_id, @queue, @max_concurrency)
ON CONFLICT (tenant_id, queue) DO UPDATE SET max_concurrency = EXCLUDED.max_concurrency;

-- name: DeleteTenantQueueQuota :exec
DELETE FROM tenant_queue_quotas WHERE tenant_id = @tenant_id AND queue = @queue;

-- name: TenantRowByName :one
SELECT id, name, weight, max_concurrency, created_at, max_items_per_step, max_runs_per_tree, max_resources FROM tenants WHERE name = @name;

-- ItemsPerStep reads the tenants' bounds on a fan-out's items (those that
-- set one; the others take dag.MaxItems).
-- name: ItemsPerStep :many
SELECT id, max_items_per_step FROM tenants WHERE id = ANY(@ids::uuid[]) AND max_items_per_step > 0;

-- TenantMaxResources reads a tenant's quotas in resources (NULL: none).
-- name: TenantMaxResources :one
SELECT max_resources FROM tenants WHERE id = @id;
