-- HeartbeatWorker registers a worker process or renews its lease (see
-- migration 00005 and internal/reaper for what a lapsed one means).
-- name: HeartbeatWorker :exec
INSERT INTO workers (id, name, queues, tenants, started_at, heartbeat_at, lease_expires_at, cap_cpu, cap_memory, cap_gpu, cap_custom, enforces)
VALUES (@id, @name, @queues, @tenants, now(), now(), now() + INTERVAL '1 second' * @ttl_seconds::float8,
        sqlc.narg(cap_cpu), sqlc.narg(cap_memory), sqlc.narg(cap_gpu), sqlc.narg(cap_custom)::jsonb, sqlc.narg(enforces))
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
       w.tenant_id, w.types, w.cap_cpu, w.cap_memory, w.cap_gpu, w.cap_custom, w.enforces,
       (SELECT count(*) FROM tasks AS t WHERE t.worker_id = w.id AND t.status = 'running')::bigint AS held,
       a.cpu AS used_cpu, a.memory AS used_memory, a.gpu AS used_gpu, a.custom AS used_custom
FROM workers AS w
CROSS JOIN LATERAL (
    -- what its running attempts ask for (docs/resources.md)
    SELECT COALESCE(sum(t.res_cpu), 0)::bigint AS cpu, COALESCE(sum(t.res_memory), 0)::bigint AS memory,
           COALESCE(sum(t.res_gpu), 0)::bigint AS gpu,
           jsonb_agg(t.res_custom) FILTER (WHERE t.res_custom IS NOT NULL) AS custom -- a list of the attempts' custom counts
    FROM tasks AS t WHERE t.worker_id = w.id AND t.status = 'running'
) AS a
WHERE w.lease_expires_at > now() - INTERVAL '1 hour'
  AND (w.tenant_id IS NULL OR w.tenant_id = @tenant OR @all_tenants::bool)
ORDER BY w.name, w.id
LIMIT 1000;
