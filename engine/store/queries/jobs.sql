-- name: DatabaseNow :one
SELECT now()::timestamptz AS now;

-- name: ShardCount :one
SELECT shard_count FROM cluster_settings WHERE id = 1;

-- name: EnsureNamespace :exec
INSERT INTO namespaces (tenant_id, name, created_at)
VALUES (@tenant_id, @name, now())
ON CONFLICT (tenant_id, name) DO NOTHING;

-- name: InsertJob :one
INSERT INTO jobs (id, tenant_id, namespace, name, description, labels, status, version, spec,
                  shard, next_fire_at, created_at, created_by, updated_at, updated_by)
VALUES (@id, @tenant_id, @namespace, @name, @description, @labels, 'active', 1, @spec,
        @shard, @next_fire_at, now(), @actor, now(), @actor)
RETURNING *;

-- name: InsertJobVersion :exec
INSERT INTO job_versions (job_id, version, tenant_id, description, labels, spec, created_at, created_by)
VALUES (@job_id, @version, @tenant_id, @description, @labels, @spec, now(), @actor);

-- name: GetJob :one
SELECT * FROM jobs WHERE tenant_id = @tenant_id AND id = @id;

-- name: GetJobForUpdate :one
SELECT * FROM jobs WHERE tenant_id = @tenant_id AND id = @id FOR UPDATE;

-- name: GetLiveJobByName :one
SELECT * FROM jobs
WHERE tenant_id = @tenant_id AND namespace = @namespace AND name = @name AND status <> 'deleted';

-- name: UpdateJobDefinition :one
UPDATE jobs
SET description = @description, labels = @labels, spec = @spec, version = version + 1,
    next_fire_at = @next_fire_at, updated_at = now(), updated_by = @actor
WHERE tenant_id = @tenant_id AND id = @id AND version = @expected_version
RETURNING *;

-- name: SetJobStatus :one
UPDATE jobs
SET status = @status, next_fire_at = @next_fire_at, updated_at = now(), updated_by = @actor,
    deleted_at = CASE WHEN @status::text = 'deleted' THEN now() END
WHERE tenant_id = @tenant_id AND id = @id
RETURNING *;

-- ListJobs pages through a tenant's jobs by (name, id) with an index range
-- scan; without a status filter it leaves out deleted jobs.
-- name: ListJobs :many
SELECT * FROM jobs
WHERE tenant_id = @tenant_id
  AND (sqlc.narg(namespace)::text IS NULL OR namespace = sqlc.narg(namespace)::text)
  AND ((sqlc.narg(status)::text IS NULL AND status <> 'deleted') OR status = sqlc.narg(status)::text)
  AND labels @> @labels::jsonb
  AND (name, id) > (@after_name::text, @after_id::uuid)
ORDER BY name, id
LIMIT @page_size;

-- name: CountJobs :one
SELECT count(*) FROM jobs WHERE tenant_id = @tenant_id;
