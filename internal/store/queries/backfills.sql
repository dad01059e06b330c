-- Backfills (docs/schedules.md): a range of a job's instants fired as runs
-- with trigger backfill by the scheduler of the job's shard.

-- name: InsertBackfill :one
INSERT INTO backfills (id, tenant_id, job_id, shard, from_at, to_at, redo, max_concurrent, newest_first, total, status, created_at, created_by, created_principal)
VALUES (@id, @tenant_id, @job_id, @shard, @from_at, @to_at, @redo, @max_concurrent, @newest_first, @total, 'running', now(), @created_by, NULLIF(@created_principal::text, ''))
RETURNING *;

-- RunningBackfillTenants is the scheduler's cheap look before it opens a
-- transaction for backfills: the tenants with a running one in the
-- shards (whose storage quotas it reads first).
-- name: RunningBackfillTenants :many
SELECT DISTINCT tenant_id FROM backfills WHERE shard = ANY(@shards::int[]) AND status = 'running';

-- RunningBackfills locks the running backfills of the shards, oldest
-- first, with their jobs' definitions (read, not locked), and how many
-- unfinished runs each has in its range (runs_active; whatever their
-- trigger: a run a redo retried keeps its own). A paused job's wait and
-- are left out, so that they hold none of the batch.
-- name: RunningBackfills :many
SELECT b.*, j.status AS job_status, j.version AS job_version, j.namespace, j.name, j.spec,
       (SELECT count(*) FROM runs AS r WHERE r.job_id = b.job_id AND r.finished_at IS NULL
            AND r.scheduled_for >= b.from_at AND r.scheduled_for <= b.to_at)::int AS active
FROM backfills AS b JOIN jobs AS j ON j.id = b.job_id
WHERE b.shard = ANY(@shards::int[]) AND b.status = 'running' AND j.status <> 'paused'
ORDER BY b.created_at
LIMIT @batch
FOR UPDATE OF b SKIP LOCKED FOR SHARE OF j SKIP LOCKED;

-- RunsAt reads the runs of a job at instants; a record (a skipped or
-- cancelled run written without tasks) has has_tasks false.
-- name: RunsAt :many
SELECT id, scheduled_for, status, EXISTS (SELECT 1 FROM tasks AS t WHERE t.run_id = runs.id) AS has_tasks
FROM runs WHERE job_id = @job_id AND scheduled_for = ANY(@ats::timestamptz[]);

-- DeleteRecords deletes runs that are records (skipped or cancelled, no
-- task), for a backfill that runs their instants: the caller takes them
-- from their tenants' usage. It returns the runs it deleted.
-- name: DeleteRecords :many
DELETE FROM runs WHERE id = ANY(@ids::uuid[]) AND status IN ('skipped', 'cancelled')
    AND NOT EXISTS (SELECT 1 FROM tasks AS t WHERE t.run_id = runs.id)
RETURNING id, tenant_id, shard, scheduled_for, status, reason;

-- name: AdvanceBackfill :exec
UPDATE backfills SET cursor_at = sqlc.narg(cursor_at), created = created + @created, existing = existing + @existing,
    retried = retried + @retried, status = @status, reason = @reason,
    finished_at = CASE WHEN @status::text = 'running' THEN NULL ELSE now() END
WHERE id = @id;

-- ListBackfills pages through a job's backfills, newest first.
-- name: ListBackfills :many
SELECT * FROM backfills WHERE tenant_id = @tenant_id AND job_id = @job_id
  AND (created_at, id) < (@before_at::timestamptz, @before_id::uuid)
ORDER BY created_at DESC, id DESC
LIMIT @page_size;

-- CountRunsBetween counts a job's runs at instants in [from, to]
-- (a dry run's "already ran").
-- name: CountRunsBetween :one
SELECT count(*)::int FROM runs WHERE job_id = @job_id AND scheduled_for >= @from_at AND scheduled_for <= @to_at;

-- CancelBackfill ends a running backfill of a job; the runs it wrote go
-- on. It waits for a scheduler step holding the row (short), then that
-- step's cursor stands.
-- name: CancelBackfill :one
UPDATE backfills SET status = 'cancelled', reason = @reason, finished_at = now()
WHERE tenant_id = @tenant_id AND job_id = @job_id AND id = @id AND status = 'running'
RETURNING *;

-- PruneFinishedBackfills deletes a batch of backfills that ended longer
-- ago than older_than_seconds (their runs keep backfill_id: no key).
-- name: PruneFinishedBackfills :execrows
DELETE FROM backfills WHERE id IN (
    SELECT id FROM backfills WHERE finished_at < now() - INTERVAL '1 second' * @older_than_seconds::float8
    ORDER BY finished_at LIMIT @batch);
