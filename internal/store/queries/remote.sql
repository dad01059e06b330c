-- Remote workers (docs/remote-workers.md).

-- OfferableTasks reads, of the tasks a gateway's River jobs name, those
-- still at the attempt before the job's (a stale job offers nothing), with
-- what an offer holds.
-- name: OfferableTasks :many
SELECT t.id, req.attempt::int AS attempt, t.tenant_id, t.queue, t.priority, t.step, r.job_id, r.job_version, j.namespace
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@attempts::int[]) AS attempt) AS req
JOIN tasks AS t ON t.id = req.id AND t.status IN ('queued', 'retrying') AND t.attempt = req.attempt - 1
JOIN runs AS r ON r.id = t.run_id
JOIN jobs AS j ON j.id = r.job_id;

-- InsertOffers offers attempts to remote workers; an offer of the same
-- attempt again (a redelivered River job) changes nothing.
-- name: InsertOffers :exec
INSERT INTO remote_offers (task_id, attempt, tenant_id, queue, worker_type, namespace, priority, offered_at)
SELECT unnest(@task_ids::uuid[]), unnest(@attempts::int[]), unnest(@tenant_ids::uuid[]), unnest(@queues::text[]),
       unnest(@worker_types::text[]), unnest(@namespaces::text[]), unnest(@priorities::int[]), now()
ON CONFLICT (task_id) DO UPDATE SET attempt = excluded.attempt, offered_at = excluded.offered_at
WHERE remote_offers.attempt < excluded.attempt;

-- TakeOffers takes up to @max offers of the given queues and types (and
-- namespaces, unless none are given), most urgent first, skipping those
-- another claim holds.
-- name: TakeOffers :many
DELETE FROM remote_offers AS o
WHERE o.task_id IN (
    SELECT x.task_id FROM remote_offers AS x
    WHERE x.queue = ANY(@queues::text[]) AND x.worker_type = ANY(@worker_types::text[])
      AND (COALESCE(cardinality(@namespaces::text[]), 0) = 0 OR x.namespace = ANY(@namespaces::text[]))
    ORDER BY x.priority, x.offered_at
    LIMIT @max
    FOR UPDATE SKIP LOCKED
)
RETURNING o.task_id, o.attempt;

-- LockRemoteWorker locks a remote worker's row: its claims take turns.
-- (RemoteWorkerUse then reads, in a statement of its own, so that under
-- READ COMMITTED it sees what a claim that held the row before committed.)
-- name: LockRemoteWorker :exec
SELECT id FROM workers WHERE id = @id FOR NO KEY UPDATE;

-- RemoteWorkerUse reads what a remote worker's running attempts ask for
-- together (custom: a list of their custom counts).
-- name: RemoteWorkerUse :one
SELECT COALESCE(sum(t.res_cpu), 0)::bigint AS cpu, COALESCE(sum(t.res_memory), 0)::bigint AS memory,
       COALESCE(sum(t.res_gpu), 0)::bigint AS gpu,
       jsonb_agg(t.res_custom) FILTER (WHERE t.res_custom IS NOT NULL) AS custom
FROM tasks AS t
WHERE t.worker_id = @id AND t.status = 'running';

-- ScanOffers reads up to @max offers of the given queues and types (and
-- namespaces, unless none are given), most urgent first, with what their
-- tasks ask for, locking them (skipping those another claim holds): of a
-- claim of a worker with a capacity, only those asking at most its free
-- cpu, memory and gpu (@free_*), so that large offers ahead do not hide
-- the ones it could take; it takes those that still fit (custom counts
-- too) as it adds them up.
-- name: ScanOffers :many
SELECT o.task_id, o.attempt, t.res_cpu, t.res_memory, t.res_gpu, t.res_custom
FROM remote_offers AS o JOIN tasks AS t ON t.id = o.task_id
WHERE o.queue = ANY(@queues::text[]) AND o.worker_type = ANY(@worker_types::text[])
  AND (COALESCE(cardinality(@namespaces::text[]), 0) = 0 OR o.namespace = ANY(@namespaces::text[]))
  AND t.res_cpu <= @free_cpu AND t.res_memory <= @free_memory AND t.res_gpu <= @free_gpu
ORDER BY o.priority, o.offered_at
LIMIT @max
FOR UPDATE OF o SKIP LOCKED;

-- name: TakeChosenOffers :many
DELETE FROM remote_offers AS o WHERE o.task_id = ANY(@ids::uuid[])
RETURNING o.task_id, o.attempt;

-- LeaseRemoteAttempts gives attempts just started on a remote worker
-- their own lease and deadline (their start plus the step's timeout); the
-- lease never runs past the deadline.
-- name: LeaseRemoteAttempts :exec
UPDATE tasks AS t
SET deadline_at = now() + INTERVAL '1 second' * req.timeout, 
    lease_expires_at = now() + INTERVAL '1 second' * LEAST(@lease_seconds::float8, req.timeout)
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@tokens::bigint[]) AS token, unnest(@timeout_seconds::float8[]) AS timeout) AS req
WHERE t.id = req.id AND t.fencing_token = req.token AND t.status = 'running';

-- RenewRemoteLeases renews, in one statement, the leases of the attempts
-- a remote worker asks for, and returns those it renewed: still running on
-- that worker under that token, their lease not lapsed (the reaper may be
-- failing it) and their deadline not passed.
-- name: RenewRemoteLeases :many
UPDATE tasks AS t
SET lease_expires_at = LEAST(now() + INTERVAL '1 second' * @lease_seconds::float8, t.deadline_at)
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@tokens::bigint[]) AS token) AS req
WHERE t.id = req.id AND t.fencing_token = req.token AND t.status = 'running' AND t.worker_id = @worker_id
  AND t.lease_expires_at > now() AND t.deadline_at > now()
RETURNING t.id;

-- RemoteAttemptStates says, of attempts a heartbeat could not renew, why:
-- the task's status, token and worker, and whether its deadline passed.
-- name: RemoteAttemptStates :many
SELECT t.id, t.status, t.fencing_token, t.worker_id, COALESCE(t.deadline_at <= now(), false)::bool AS past_deadline
FROM tasks AS t WHERE t.id = ANY(@ids::uuid[]);

-- RemoteAttempts reads, of the attempts a remote worker reports (tasks
-- and fencing tokens in parallel arrays), those that started on it
-- (@worker of @tenant_id), with their run, queue, step and job version:
-- an attempt that did not start there has no row. A running attempt is
-- read from its task's row, one that ended from attempts.
-- name: RemoteAttempts :many
WITH req AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@fencing_tokens::bigint[]) AS token
)
SELECT t.id, req.token::bigint AS fencing_token, t.run_id, t.queue, t.step, t.attempt, r.job_id, r.job_version
FROM req
JOIN tasks AS t ON t.id = req.id
JOIN runs AS r ON r.id = t.run_id
WHERE t.tenant_id = @tenant_id
  AND (t.status = 'running' AND t.fencing_token = req.token AND t.attempt_worker = @worker::text
       OR EXISTS (SELECT 1 FROM attempts AS a WHERE a.task_id = t.id AND a.fencing_token = req.token AND a.worker = @worker::text));

-- HeartbeatRemoteWorker registers a remote worker or renews its lease,
-- with what it serves now (its queues and slots, its types).
-- name: HeartbeatRemoteWorker :exec
INSERT INTO workers (id, name, queues, tenants, tenant_id, types, started_at, heartbeat_at, lease_expires_at, key_id,
                     cap_cpu, cap_memory, cap_gpu, cap_custom)
VALUES (@id, @name, @queues, '[]', @tenant_id, @types, now(), now(), now() + INTERVAL '1 second' * @ttl_seconds::float8, @key_id,
        sqlc.narg(cap_cpu), sqlc.narg(cap_memory), sqlc.narg(cap_gpu), sqlc.narg(cap_custom)::jsonb)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), lease_expires_at = excluded.lease_expires_at,
    queues = excluded.queues, types = excluded.types,
    cap_cpu = excluded.cap_cpu, cap_memory = excluded.cap_memory, cap_gpu = excluded.cap_gpu, cap_custom = excluded.cap_custom,
    started_at = CASE WHEN workers.lease_expires_at < now() THEN now() ELSE workers.started_at END;

-- DeleteStaleOffers deletes up to @batch offers whose task moved on
-- (cancelled, pruned, started): a claim drops those it takes, but one of a
-- type or namespace no worker serves any more would stay.
-- name: DeleteStaleOffers :execrows
DELETE FROM remote_offers AS o
WHERE o.task_id IN (
    SELECT x.task_id FROM remote_offers AS x
    WHERE NOT EXISTS (SELECT 1 FROM tasks AS t WHERE t.id = x.task_id AND t.status IN ('queued', 'retrying') AND t.attempt = x.attempt - 1)
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
);

-- RenewRemoteWorker renews a remote worker's row (registered by its
-- claims).
-- name: RenewRemoteWorker :exec
UPDATE workers SET heartbeat_at = now(), lease_expires_at = now() + INTERVAL '1 second' * @ttl_seconds::float8
WHERE id = @id;

-- KeyWorkers counts the live remote workers of a key but one (the one
-- registering), and the slots they declare together.
-- name: KeyWorkers :one
SELECT count(*)::int AS workers,
       COALESCE(sum((SELECT COALESCE(sum(value::bigint), 0) FROM jsonb_each_text(w.queues))), 0)::bigint AS slots
FROM workers AS w
WHERE w.key_id = @key_id AND w.id <> @self AND w.lease_expires_at > now();
