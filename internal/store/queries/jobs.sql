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
-- (JobScheduleForUpdate, SetJobSchedule).
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

-- SetJobSchedule writes a job's schedule row after a change of its jobs
-- row (in the same transaction, after locking that row): its shard, and
-- its next fire time when the job is active (NULL otherwise).
-- name: SetJobSchedule :exec
INSERT INTO job_schedules (job_id, tenant_id, shard, next_fire_at)
VALUES (@job_id, @tenant_id, @shard, sqlc.narg(next_fire_at))
ON CONFLICT (job_id) DO UPDATE SET shard = EXCLUDED.shard, next_fire_at = EXCLUDED.next_fire_at;

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

-- ListJobs pages through a tenant's jobs by (name, id). A scoped caller
-- (one without a tenant-wide role) sees only the namespaces and the jobs
-- ("namespace/name") it was granted. Without @with_steps, each job's spec comes
-- without its steps (spec.steps and spec.run: the summary a list shows).
-- The page is cut where its specs pass @budget bytes (as JSON text, the
-- first job whatever its size): page_rows is how many jobs the page held
-- before the cut, so that the caller knows more follow.
-- name: ListJobs :many
WITH page AS (
    SELECT j.id, j.tenant_id, j.namespace, j.name, j.description, j.labels, j.status, j.version,
           (CASE WHEN @with_steps::bool THEN j.spec ELSE j.spec - 'steps' - 'run' END)::jsonb AS spec,
           j.source, j.shard, j.next_fire_at, j.created_at, j.created_by, j.updated_at, j.updated_by, j.deleted_at
    FROM jobs AS j
    WHERE j.tenant_id = @tenant_id
      AND (sqlc.narg(namespace)::text IS NULL OR j.namespace = sqlc.narg(namespace)::text)
      AND ((sqlc.narg(status)::text IS NULL AND j.status <> 'deleted') OR j.status = sqlc.narg(status)::text)
      AND j.labels @> @labels::jsonb
      AND (sqlc.narg(name_contains)::text IS NULL OR strpos(j.name, sqlc.narg(name_contains)::text) > 0)
      AND (NOT @scoped::bool OR j.namespace = ANY(@scope_namespaces::text[])
           OR j.namespace || '/' || j.name = ANY(@scope_jobs::text[]))
      AND (j.name, j.id) > (@after_name::text, @after_id::uuid)
    ORDER BY j.name, j.id
    LIMIT @page_size
), sized AS (
    SELECT page.*, octet_length(page.spec::text)::bigint AS bytes,
           sum(octet_length(page.spec::text)) OVER (ORDER BY page.name, page.id)::bigint AS upto,
           count(*) OVER ()::bigint AS page_rows
    FROM page
)
SELECT sized.id, sized.tenant_id, sized.namespace, sized.name, sized.description, sized.labels, sized.status, sized.version,
       sized.spec, sized.source, sized.shard, sized.next_fire_at, sized.created_at, sized.created_by, sized.updated_at,
       sized.updated_by, sized.deleted_at, sized.page_rows
FROM sized
WHERE sized.upto - sized.bytes < @budget::bigint
ORDER BY sized.name, sized.id;


-- CreateLookups reads, for a batch of creations, the database clock and,
-- for each (tenant, key) in order (ord counts from 1) the
-- answer stored under it, NULLs when there is none or the key is empty.
-- name: CreateLookups :many
SELECT now()::timestamptz AS now, i.ord::int AS ord, k.request_hash, k.response
FROM (
    SELECT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@idempotency_keys::text[]) AS key,
           generate_subscripts(@tenant_ids::uuid[], 1) AS ord
) AS i
LEFT JOIN idempotency_keys AS k
    ON i.key <> '' AND k.tenant_id = i.tenant_id AND k.operation = 'CreateJob' AND k.key = i.key
ORDER BY i.ord;

-- SetBatchLockTimeout bounds, in a batch of creations' transaction, how
-- long a statement waits for a row another transaction is writing.
-- name: SetBatchLockTimeout :exec
SET LOCAL lock_timeout = '1s';

-- CreateJobs writes new jobs in one statement (for the API, a batch of
-- concurrent creations: one statement and one commit for all; for apply,
-- one in its transaction): each with its namespace, version 1, audit row,
-- idempotency key (when one is given) and schedule row. Foreign keys are
-- checked at the statement's end. A job
-- whose name is taken (by a live job, or by an earlier job of the batch)
-- is left out with its version, audit row and key, and is missing from
-- the answer. A key another transaction took meanwhile fails the whole
-- statement (its primary key), as any other error does: the caller then
-- writes each job alone.
-- name: CreateJobs :many
WITH input AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tenant_ids::uuid[]) AS tenant_id,
           unnest(@namespaces::text[]) AS namespace, unnest(@names::text[]) AS name,
           unnest(@descriptions::text[]) AS description, unnest(@labels::text[])::jsonb AS labels,
           unnest(@specs::text[])::jsonb AS spec, NULLIF(unnest(@sources::text[]), '')::jsonb AS source,
           unnest(@shards::int[]) AS shard,
           -- the zero time (Go's) for none
           NULLIF(unnest(@next_fire_ats::timestamptz[]), '0001-01-01 00:00:00+00') AS next_fire_at,
           unnest(@actors::text[]) AS actor, unnest(@audit_ids::uuid[]) AS audit_id,
           unnest(@snapshots::text[])::jsonb AS snapshot, unnest(@idempotency_keys::text[]) AS idempotency_key,
           unnest(@request_hashes::bytea[]) AS request_hash,
           -- the writer's key (the zero UUID for none)
           NULLIF(unnest(@author_keys::uuid[]), '00000000-0000-0000-0000-000000000000'::uuid) AS author_key
), ns AS (
    INSERT INTO namespaces (tenant_id, name, created_at)
    SELECT DISTINCT tenant_id, namespace, @now::timestamptz FROM input
    ON CONFLICT (tenant_id, name) DO NOTHING
    RETURNING name
), j AS (
    INSERT INTO jobs (id, tenant_id, namespace, name, description, labels, status, version, spec, source,
                      shard, next_fire_at, created_at, created_by, updated_at, updated_by)
    SELECT id, tenant_id, namespace, name, description, labels, 'active', 1, spec, source,
           shard, next_fire_at, @now::timestamptz, actor, @now::timestamptz, actor
    FROM input
    ON CONFLICT (tenant_id, namespace, name) WHERE status <> 'deleted' DO NOTHING
    RETURNING id, tenant_id, shard, octet_length(spec::text) AS bytes
), v AS (
    INSERT INTO job_versions (job_id, version, tenant_id, description, labels, spec, created_at, created_by)
    SELECT i.id, 1, i.tenant_id, i.description, i.labels, i.spec, @now::timestamptz, i.actor FROM input AS i JOIN j ON j.id = i.id
), a AS (
    INSERT INTO audit_log (id, tenant_id, at, actor, action, target_kind, target_id, target_name, before, after)
    SELECT i.audit_id, i.tenant_id, @now::timestamptz, i.actor, 'create', 'job', i.id, i.namespace || '/' || i.name, NULL, i.snapshot
    FROM input AS i JOIN j ON j.id = i.id
), k AS (
    INSERT INTO idempotency_keys (tenant_id, operation, key, request_hash, response, created_at)
    SELECT i.tenant_id, 'CreateJob', i.idempotency_key, i.request_hash, i.snapshot, @now::timestamptz
    FROM input AS i JOIN j ON j.id = i.id
    WHERE i.idempotency_key <> ''
), s AS (
    INSERT INTO job_schedules (job_id, tenant_id, shard, next_fire_at)
    SELECT i.id, i.tenant_id, i.shard, i.next_fire_at FROM input AS i JOIN j ON j.id = i.id
), g AS (
    -- schedule.after, read from the normalized definition (namespace and
    -- on filled in): job_triggers (SetJobTrigger on a change)
    INSERT INTO job_triggers (job_id, tenant_id, upstream_namespace, upstream_name, outcomes)
    SELECT i.id, i.tenant_id, i.spec #>> '{schedule,after,namespace}', i.spec #>> '{schedule,after,job}',
           ARRAY(SELECT jsonb_array_elements_text(i.spec #> '{schedule,after,on}'))
    FROM input AS i JOIN j ON j.id = i.id
    WHERE i.spec #> '{schedule,after}' IS NOT NULL
), ev AS (
    -- schedule.event: job_events (SetJobEvent on a change)
    INSERT INTO job_events (job_id, tenant_id, type)
    SELECT i.id, i.tenant_id, i.spec #>> '{schedule,event,type}'
    FROM input AS i JOIN j ON j.id = i.id
    WHERE i.spec #> '{schedule,event}' IS NOT NULL
), c AS (
    -- the jobs its steps run (run.job, namespace filled in): job_calls
    -- (DeleteJobCalls and InsertJobCalls on a change)
    INSERT INTO job_calls (job_id, tenant_id, callee_namespace, callee_name, author_key)
    SELECT DISTINCT i.id, i.tenant_id, st #>> '{run,job,namespace}', st #>> '{run,job,name}', i.author_key
    FROM input AS i JOIN j ON j.id = i.id, jsonb_array_elements(i.spec -> 'steps') AS st
    WHERE st #> '{run,job}' IS NOT NULL
), p AS (
    -- the resource profiles it names (its steps' and its defaults'):
    -- job_profiles (DeleteJobProfiles and InsertJobProfiles on a change)
    INSERT INTO job_profiles (job_id, tenant_id, profile)
    SELECT DISTINCT i.id, i.tenant_id, x.profile
    FROM input AS i JOIN j ON j.id = i.id,
         LATERAL (SELECT i.spec #>> '{defaults,resource_profile}' AS profile
                  UNION SELECT st ->> 'resource_profile' FROM jsonb_array_elements(i.spec -> 'steps') AS st) AS x
    WHERE x.profile IS NOT NULL
), u AS (
    -- With @count_usage, what the tenants hold (tenant_job_usage), in
    -- key order: two batches lock the rows they share in one order. After
    -- ns (it reads it): a statement that waits there for another
    -- transaction creating the namespace holds no usage row meanwhile,
    -- which every creation of the tenant in the shard would wait on.
    -- Without it (apply), the caller counts the bytes returned.
    -- The audit row's bytes are history's.
    INSERT INTO tenant_job_usage (tenant_id, shard, jobs, definition_bytes, history_bytes)
    SELECT j.tenant_id, j.shard, count(*), sum(j.bytes), sum(octet_length(i.snapshot::text))
    FROM j JOIN input AS i ON i.id = j.id, (SELECT count(*) FROM ns) AS after_ns
    WHERE @count_usage::bool
    GROUP BY j.tenant_id, j.shard ORDER BY j.tenant_id, j.shard
    ON CONFLICT (tenant_id, shard) DO UPDATE
    SET jobs = tenant_job_usage.jobs + EXCLUDED.jobs, definition_bytes = tenant_job_usage.definition_bytes + EXCLUDED.definition_bytes,
        history_bytes = tenant_job_usage.history_bytes + EXCLUDED.history_bytes
)
SELECT j.id, j.bytes::bigint AS bytes, octet_length(i.snapshot::text)::bigint AS history_bytes FROM j JOIN input AS i ON i.id = j.id;

-- AppliedJobsIn lists the live jobs of the given namespaces that were
-- applied from files: what --prune may delete.
-- name: AppliedJobsIn :many
SELECT * FROM jobs
WHERE tenant_id = @tenant_id AND namespace = ANY(@namespaces::text[]) AND status <> 'deleted' AND source IS NOT NULL
ORDER BY namespace, name;

-- LastRuns returns the latest run (by scheduled instant) of each job, its
-- status as ListRuns shows it.
-- name: LastRuns :many
SELECT j.id::uuid AS job_id, r.id,
       (CASE WHEN r.status = 'pending' AND EXISTS (SELECT 1 FROM tasks AS t WHERE t.run_id = r.id AND t.started_at IS NOT NULL)
             THEN 'running' ELSE r.status END)::text AS status,
       r.scheduled_for
FROM unnest(@job_ids::uuid[]) AS j (id)
CROSS JOIN LATERAL (
    SELECT x.id, x.status, x.scheduled_for FROM runs AS x
    WHERE x.tenant_id = @tenant_id AND x.job_id = j.id
    ORDER BY x.scheduled_for DESC
    LIMIT 1
) AS r;

-- JobHistory returns a job's latest audit rows, newest first.
-- name: JobHistory :many
SELECT * FROM audit_log
WHERE tenant_id = @tenant_id AND target_id = @target_id
ORDER BY at DESC, id DESC
LIMIT @max_rows;

-- PruneJobVersions deletes a job's versions below @below that no run
-- pins (a retry reads its run's version), and returns them with their
-- bytes as counted.
-- name: PruneJobVersions :many
DELETE FROM job_versions AS v
WHERE v.job_id = @job_id AND v.version < @below
  AND NOT EXISTS (SELECT 1 FROM runs AS r WHERE r.job_id = v.job_id AND r.job_version = v.version)
RETURNING v.version, octet_length(v.spec::text)::bigint AS bytes;
