-- name: TenantByName :one
SELECT id FROM tenants WHERE name = @name;

-- name: InsertTenant :exec
INSERT INTO tenants (id, name) VALUES (@id, @name);

-- ListTenants pages through every tenant by name: those after @after.
-- name: ListTenants :many
SELECT id, name, weight, max_concurrency, created_at FROM tenants
WHERE name > @after
ORDER BY name
LIMIT @page_size;
