-- name: InsertAPIKey :exec
INSERT INTO api_keys (id, tenant_id, principal, role, system_admin, prefix, hash, created_at, created_by, expires_at,
    worker_types, worker_namespaces)
VALUES (@id, @tenant_id, @principal, @role, @system_admin, @prefix, @hash, now(), @created_by, sqlc.narg(expires_at),
    @worker_types, @worker_namespaces);

-- APIKeyByHash finds the live key with this hash (not revoked, not
-- expired), with its tenant's name.
-- name: APIKeyByHash :one
SELECT k.id, k.tenant_id, t.name AS tenant_name, k.principal, k.role, k.system_admin, k.prefix, k.expires_at,
       k.worker_types, k.worker_namespaces
FROM api_keys AS k JOIN tenants AS t ON t.id = k.tenant_id
WHERE k.hash = @hash AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now());

-- name: RevokeAPIKey :one
UPDATE api_keys SET revoked_at = now()
WHERE tenant_id = @tenant_id AND prefix = @prefix AND revoked_at IS NULL
RETURNING id, principal, role;

-- name: ListAPIKeys :many
SELECT id, principal, role, system_admin, prefix, created_at, created_by, expires_at, revoked_at,
       worker_types, worker_namespaces
FROM api_keys WHERE tenant_id = @tenant_id
ORDER BY created_at, id;



-- KeyByID reads a key that is neither revoked nor expired, by id.
-- name: KeyByID :one
SELECT k.id, k.tenant_id, k.principal, k.role, k.prefix FROM api_keys AS k
WHERE k.id = @id AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now());
