-- PrincipalGrants are the grants a principal holds in a tenant.
-- name: PrincipalGrants :many
SELECT namespace, job_name, role FROM grants
WHERE tenant_id = @tenant_id AND principal = @principal
ORDER BY namespace, job_name;

-- name: GrantByScope :one
SELECT id, role FROM grants
WHERE tenant_id = @tenant_id AND principal = @principal AND namespace = @namespace AND job_name = @job_name;

-- name: InsertGrant :exec
INSERT INTO grants (id, tenant_id, principal, namespace, job_name, role, created_at, created_by)
VALUES (@id, @tenant_id, @principal, @namespace, @job_name, @role, now(), @created_by);

-- name: UpdateGrantRole :exec
UPDATE grants SET role = @role, created_at = now(), created_by = @created_by
WHERE id = @id;

-- name: DeleteGrant :one
DELETE FROM grants
WHERE tenant_id = @tenant_id AND principal = @principal AND namespace = @namespace AND job_name = @job_name
RETURNING id, role;

-- ListGrants pages through a tenant's grants by (namespace, job_name,
-- principal): those after the given triple. Unset filters (NULL) do not
-- filter.
-- name: ListGrants :many
SELECT id, principal, namespace, job_name, role, created_at, created_by FROM grants
WHERE tenant_id = @tenant_id
  AND (sqlc.narg(namespace)::text IS NULL OR namespace = sqlc.narg(namespace)::text)
  AND (sqlc.narg(principal)::text IS NULL OR principal = sqlc.narg(principal)::text)
  AND (namespace, job_name, principal) > (@after_namespace::text, @after_job::text, @after_principal::text)
ORDER BY namespace, job_name, principal
LIMIT @page_size;

-- The locate queries name the job a request's ids point at, in the
-- caller's tenant, so that a grant on its namespace or on it can apply.

-- name: LocateJob :one
SELECT namespace, name FROM jobs WHERE tenant_id = @tenant_id AND id = @id;

-- name: LocateRun :one
SELECT j.namespace, j.name FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
WHERE r.tenant_id = @tenant_id AND r.id = @id;

-- name: LocateTasks :many
SELECT DISTINCT j.namespace, j.name
FROM tasks AS t JOIN runs AS r ON r.id = t.run_id JOIN jobs AS j ON j.id = r.job_id
WHERE t.tenant_id = @tenant_id AND t.id = ANY(@ids::uuid[]);
