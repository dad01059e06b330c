-- name: DatabaseNow :one
SELECT now()::timestamptz AS now;

-- name: ShardCount :one
SELECT shard_count FROM cluster_settings WHERE id = 1;

-- name: InsertJobVersion :exec
INSERT INTO job_versions (job_id, version, tenant_id, description, labels, spec, created_at, created_by)
VALUES (@job_id, @version, @tenant_id, @description, @labels, @spec, now(), @actor);

-- name: GetJob :one
SELECT * FROM jobs WHERE tenant_id = @tenant_id AND id = @id;

-- GetJobForUpdate locks a job for a definition change. FOR NO KEY UPDATE,
-- not FOR UPDATE: a firing transaction holding the job's schedule row
-- (DueJobs) checks its runs' foreign key with FOR KEY SHARE, which FOR
-- UPDATE would block while the change waits for the schedule row: a
-- deadlock. Lock order: the jobs row, then its schedule row
-- (JobScheduleForUpdate, or the trigger's write).
-- name: GetJobForUpdate :one
SELECT * FROM jobs WHERE tenant_id = @tenant_id AND id = @id FOR NO KEY UPDATE;

-- JobSchedules reads the live next fire times of jobs (job_schedules):
-- jobs.next_fire_at is the one a definition change set.
-- name: JobSchedules :many
SELECT job_id, next_fire_at FROM job_schedules WHERE job_id = ANY(@ids::uuid[]);

-- JobScheduleForUpdate locks a job's schedule row (after its jobs row) and
-- reads its live next fire time: a firing that advances it commits first.
-- name: JobScheduleForUpdate :one
SELECT next_fire_at FROM job_schedules WHERE job_id = @job_id FOR UPDATE;

-- name: GetLiveJobByName :one
SELECT * FROM jobs
WHERE tenant_id = @tenant_id AND namespace = @namespace AND name = @name AND status <> 'deleted';

-- name: UpdateJobDefinition :one
UPDATE jobs
SET description = @description, labels = @labels, spec = @spec, version = version + 1,
    source = COALESCE(sqlc.narg(source)::jsonb, source),
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
-- ListJobs pages through a tenant's jobs by (name, id). A scoped caller
-- (one without a tenant-wide role) sees only the namespaces and the jobs
-- ("namespace/name") it was granted.
-- name: ListJobs :many
SELECT * FROM jobs
WHERE tenant_id = @tenant_id
  AND (sqlc.narg(namespace)::text IS NULL OR namespace = sqlc.narg(namespace)::text)
  AND ((sqlc.narg(status)::text IS NULL AND status <> 'deleted') OR status = sqlc.narg(status)::text)
  AND labels @> @labels::jsonb
  AND (sqlc.narg(name_contains)::text IS NULL OR strpos(name, sqlc.narg(name_contains)::text) > 0)
  AND (NOT @scoped::bool OR namespace = ANY(@scope_namespaces::text[])
       OR namespace || '/' || name = ANY(@scope_jobs::text[]))
  AND (name, id) > (@after_name::text, @after_id::uuid)
ORDER BY name, id
LIMIT @page_size;


-- CreateLookup reads the database clock and, for an idempotent create, the
-- answer stored under the key (NULLs when there is none), in one round trip.
-- name: CreateLookup :one
SELECT now()::timestamptz AS now, k.request_hash, k.response
FROM (SELECT 1) AS one
LEFT JOIN idempotency_keys AS k
    ON k.tenant_id = @tenant_id AND k.operation = 'CreateJob' AND k.key = @idempotency_key;

-- CreateJob writes a new job with its namespace, version 1, audit row and
-- idempotency key (when one is given) in one statement, hence one implicit
-- transaction and one round trip. Foreign keys are checked at its end.
-- name: CreateJob :exec
WITH ns AS (
    INSERT INTO namespaces (tenant_id, name, created_at)
    VALUES (@tenant_id, @namespace, @now)
    ON CONFLICT (tenant_id, name) DO NOTHING
), j AS (
    INSERT INTO jobs (id, tenant_id, namespace, name, description, labels, status, version, spec, source,
                      shard, next_fire_at, created_at, created_by, updated_at, updated_by)
    VALUES (@id, @tenant_id, @namespace, @name, @description, @labels, 'active', 1, @spec, sqlc.narg(source)::jsonb,
            @shard, @next_fire_at, @now, @actor, @now, @actor)
    RETURNING id
), v AS (
    INSERT INTO job_versions (job_id, version, tenant_id, description, labels, spec, created_at, created_by)
    SELECT j.id, 1, @tenant_id, @description, @labels, @spec, @now, @actor FROM j
), a AS (
    INSERT INTO audit_log (id, tenant_id, at, actor, action, target_kind, target_id, target_name, before, after)
    SELECT @audit_id, @tenant_id, @now, @actor, 'create', 'job', j.id, @target_name, NULL, @snapshot::jsonb FROM j
)
INSERT INTO idempotency_keys (tenant_id, operation, key, request_hash, response, created_at)
SELECT @tenant_id, 'CreateJob', @idempotency_key::text, @request_hash, @snapshot::jsonb, @now FROM j
WHERE @idempotency_key::text <> '';

-- AppliedJobsIn lists the live jobs of the given namespaces that were
-- applied from files: what --prune may delete.
-- name: AppliedJobsIn :many
SELECT * FROM jobs
WHERE tenant_id = @tenant_id AND namespace = ANY(@namespaces::text[]) AND status <> 'deleted' AND source IS NOT NULL
ORDER BY namespace, name;

-- LastRuns returns the latest run (by scheduled instant) of each job.
-- name: LastRuns :many
SELECT j.id::uuid AS job_id, r.id, r.status, r.scheduled_for
FROM unnest(@job_ids::uuid[]) AS j (id)
CROSS JOIN LATERAL (
    SELECT id, status, scheduled_for FROM runs
    WHERE tenant_id = @tenant_id AND job_id = j.id
    ORDER BY scheduled_for DESC
    LIMIT 1
) AS r;

-- JobHistory returns a job's latest audit rows, newest first.
-- name: JobHistory :many
SELECT * FROM audit_log
WHERE tenant_id = @tenant_id AND target_id = @target_id
ORDER BY at DESC, id DESC
LIMIT @max_rows;
