-- HeartbeatWorker registers a worker process or renews its lease (see
-- migration 00005 and internal/reaper for what a lapsed one means).
-- name: HeartbeatWorker :exec
INSERT INTO workers (id, name, queues, tenants, started_at, heartbeat_at, lease_expires_at)
VALUES (@id, @name, @queues, @tenants, now(), now(), now() + INTERVAL '1 second' * @ttl_seconds::float8)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), lease_expires_at = excluded.lease_expires_at;

-- LeaveWorker ends the lease of a worker that stopped cleanly (nothing it
-- fetched is left running in River).
-- name: LeaveWorker :exec
UPDATE workers SET lease_expires_at = now(), swept_at = now() WHERE id = @id;

-- ClaimLapsedWorker takes one worker whose lease lapsed since it was last
-- swept and marks it swept; the caller redelivers what it had fetched in
-- the same transaction, so a crash of the sweeper leaves it to sweep.
-- skip: workers whose sweep failed in this pass (their queue database
-- does not answer), so that the others are swept meanwhile.
-- name: ClaimLapsedWorker :one
UPDATE workers SET swept_at = now()
WHERE id = (
    SELECT w.id FROM workers AS w
    WHERE w.lease_expires_at < now() AND (w.swept_at IS NULL OR w.swept_at < w.lease_expires_at)
      AND w.id <> ALL(@skip::uuid[])
    ORDER BY w.lease_expires_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING id, name, queues;

-- ForgetOldWorkers deletes workers gone (and swept) for more than a day.
-- name: ForgetOldWorkers :exec
DELETE FROM workers
WHERE lease_expires_at < now() - INTERVAL '1 day' AND swept_at IS NOT NULL AND swept_at >= lease_expires_at;

-- UnstartedTasks locks, in id order, those of the given tasks that have
-- not started the attempt their River job was made for: still queued or
-- retrying at the attempt before it.
-- name: UnstartedTasks :many
SELECT t.id, t.tenant_id, t.queue, t.priority, t.attempt
FROM tasks AS t
JOIN (SELECT unnest(@ids::uuid[]) AS id, unnest(@attempts::int[]) AS attempt) AS r ON r.id = t.id
WHERE t.status IN ('queued', 'retrying') AND t.attempt = r.attempt - 1
ORDER BY t.id
FOR UPDATE OF t;

-- ListWorkers lists worker processes whose lease lapsed less than an hour
-- ago (or not at all), by name: the cluster's own, and the remote workers
-- of @tenant (of every tenant with @all_tenants), with the attempts each
-- holds.
-- name: ListWorkers :many
SELECT w.id, w.name, w.queues, w.tenants, w.started_at, w.heartbeat_at, w.lease_expires_at, w.lease_expires_at > now() AS live,
       w.tenant_id, w.types,
       (SELECT count(*) FROM tasks AS t WHERE t.worker_id = w.id AND t.status = 'running')::bigint AS held
FROM workers AS w
WHERE w.lease_expires_at > now() - INTERVAL '1 hour'
  AND (w.tenant_id IS NULL OR w.tenant_id = @tenant OR @all_tenants::bool)
ORDER BY w.name, w.id
LIMIT 1000;
