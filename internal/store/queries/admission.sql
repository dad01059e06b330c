-- Admission: see package dispatch (admit.go) for the transaction and its
-- lock order.

-- name: EnsureQueue :exec
INSERT INTO queues (name) VALUES (@name) ON CONFLICT (name) DO NOTHING;

-- LockQueue takes the queue's admission lock, or returns no row when
-- another admitter holds it.
-- name: LockQueue :one
SELECT name FROM queues WHERE name = @name FOR UPDATE SKIP LOCKED;

-- QueueSlots is the concurrency the live workers serving the queue
-- advertise.
-- name: QueueSlots :one
SELECT COALESCE(sum((queues ->> @queue::text)::int), 0)::bigint AS slots
FROM workers WHERE lease_expires_at > now() AND queues ->> @queue::text IS NOT NULL;

-- QueueCapacities lists the capacity each live worker serving the queue
-- declares (a NULL cap_cpu: none declared), with its slots there.
-- name: QueueCapacities :many
SELECT (queues ->> @queue::text)::int AS slots, cap_cpu, cap_memory, cap_gpu, cap_custom
FROM workers WHERE lease_expires_at > now() AND queues ->> @queue::text IS NOT NULL;

-- InFlightByTenant counts, per tenant, the queue's tasks that hold a slot,
-- and what they ask for together (custom: a list of their custom counts).
-- name: InFlightByTenant :many
SELECT tenant_id, count(*)::bigint AS in_flight,
       COALESCE(sum(res_cpu), 0)::bigint AS cpu, COALESCE(sum(res_memory), 0)::bigint AS memory,
       COALESCE(sum(res_gpu), 0)::bigint AS gpu,
       jsonb_agg(res_custom) FILTER (WHERE res_custom IS NOT NULL) AS custom
FROM tasks
WHERE queue = @queue AND admitted_at IS NOT NULL AND status IN ('queued', 'running', 'retrying')
GROUP BY tenant_id;

-- WaitingTenants lists the tenants with tasks waiting for admission in the
-- queue, eligible now (a retry in its backoff is not: its tenant would
-- take a share of the pass it cannot use): a loose index scan, one probe
-- per tenant whatever the backlog, then for each tenant a probe per
-- priority for a task ready now (the index orders ready_at within a
-- priority, so a tenant's retries in their backoff cost no scan).
-- name: WaitingTenants :many
WITH RECURSIVE w (tenant_id) AS (
    (SELECT t.tenant_id FROM tasks AS t
     WHERE t.queue = @queue AND t.admitted_at IS NULL AND t.status IN ('queued', 'retrying')
     ORDER BY t.tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT t.tenant_id FROM tasks AS t
            WHERE t.queue = @queue AND t.admitted_at IS NULL AND t.status IN ('queued', 'retrying')
              AND t.tenant_id > w.tenant_id
            ORDER BY t.tenant_id LIMIT 1)
    FROM w WHERE w.tenant_id IS NOT NULL
)
SELECT w.tenant_id::uuid AS tenant_id FROM w
WHERE w.tenant_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM unnest('{3, 2, 1, 4}'::int[]) AS p (priority) -- normal first: most tasks are
    WHERE EXISTS (SELECT 1 FROM tasks AS k
                  WHERE k.queue = @queue AND k.tenant_id = w.tenant_id AND k.priority = p.priority
                    AND k.admitted_at IS NULL AND k.status IN ('queued', 'retrying') AND k.ready_at <= now()))
LIMIT 10000;

-- TenantLimits reads the weight and quotas of tenants: max_concurrency
-- across all queues (0: none), the cap in this queue (0: none; a bound
-- queue, QUEUE|TENANT, has its queue's), and the quotas in resources
-- across all queues (NULL: none).
-- name: TenantLimits :many
SELECT t.id, t.weight, t.max_concurrency, COALESCE(q.max_concurrency, 0)::int AS queue_max, t.max_resources
FROM tenants AS t
LEFT JOIN tenant_queue_quotas AS q ON q.tenant_id = t.id AND q.queue = split_part(@queue::text, '|', 1)
WHERE t.id = ANY(@ids::uuid[])
ORDER BY t.id;

-- LockTenants serializes the admitters of different queues deciding for
-- the same tenants with a quota across queues (in id order: no deadlock),
-- and returns the tenants it locked: one another admitter holds is skipped
-- this pass (SKIP LOCKED), so a stalled admitter never stalls others.
-- FOR NO KEY UPDATE leaves the foreign-key checks of inserts alone.
-- name: LockTenants :many
SELECT id FROM tenants WHERE id = ANY(@ids::uuid[]) ORDER BY id FOR NO KEY UPDATE SKIP LOCKED;

-- TenantInFlight counts each tenant's tasks holding a slot in any queue,
-- and what they ask for together (custom: a list of their custom counts).
-- name: TenantInFlight :many
SELECT tenant_id, count(*)::bigint AS in_flight,
       COALESCE(sum(res_cpu), 0)::bigint AS cpu, COALESCE(sum(res_memory), 0)::bigint AS memory,
       COALESCE(sum(res_gpu), 0)::bigint AS gpu,
       jsonb_agg(res_custom) FILTER (WHERE res_custom IS NOT NULL) AS custom
FROM tasks
WHERE tenant_id = ANY(@ids::uuid[]) AND admitted_at IS NOT NULL AND status IN ('queued', 'running', 'retrying')
GROUP BY tenant_id;

-- AdmissionCandidates lists, for each tenant and each priority, the
-- queue's oldest eligible waiting tasks (up to the tenant's limit each):
-- the admitter merges them by aged priority. A task asking more cpu,
-- memory or gpu than the largest live worker has (@most_*) is not read:
-- it could not be admitted, and must not hide those behind it. A task
-- that has waited past @reserve_seconds may hold room back for itself
-- (dispatch.choose). A task with a rate limit comes with its key (the
-- pass spends its tokens: rates.go).
-- name: AdmissionCandidates :many
SELECT c.id, c.tenant_id, c.priority, c.ready_at::timestamptz AS ready_at,
       (c.ready_at < now() - INTERVAL '1 second' * @aging_seconds::float8)::bool AS aged,
       (c.ready_at < now() - INTERVAL '1 second' * @reserve_seconds::float8)::bool AS may_reserve,
       c.res_cpu, c.res_memory, c.res_gpu, c.res_custom,
       COALESCE(c.rate_key, '')::text AS rate_key, COALESCE(c.rate_limit, 1)::int AS rate_limit, COALESCE(c.rate_per_ms, 0)::bigint AS rate_per_ms,
       c.rate_at, now()::timestamptz AS now
FROM (SELECT unnest(@tenants::uuid[]) AS id, unnest(@limits::int[]) AS lim) AS t
CROSS JOIN generate_series(1, 4) AS p (priority)
CROSS JOIN LATERAL (
    SELECT k.id, k.tenant_id, k.priority, k.ready_at, k.res_cpu, k.res_memory, k.res_gpu, k.res_custom,
           k.rate_key, k.rate_limit, k.rate_per_ms, k.rate_at FROM tasks AS k
    WHERE k.queue = @queue AND k.tenant_id = t.id AND k.priority = p.priority
      AND k.admitted_at IS NULL AND k.status IN ('queued', 'retrying') AND k.ready_at <= now()
      AND k.res_cpu <= @most_cpu AND k.res_memory <= @most_memory AND k.res_gpu <= @most_gpu
    ORDER BY k.ready_at
    LIMIT t.lim
) AS c;

-- AdmitTasks marks the chosen tasks admitted, skipping any that moved on
-- meanwhile (cancelled), and returns what their River jobs need. A task
-- with a rate limit keeps when it spent its token (rate_at: its place in
-- line is used; a retry is lined up again).
-- name: AdmitTasks :many
UPDATE tasks SET admitted_at = now(), rate_at = CASE WHEN rate_key IS NOT NULL THEN now() END
WHERE id = ANY(@ids::uuid[]) AND admitted_at IS NULL AND status IN ('queued', 'retrying')
RETURNING id, tenant_id, priority, attempt, EXTRACT(EPOCH FROM now() - ready_at)::float8 AS waited_seconds;

-- SetReadyAt starts the wait of retried tasks at the end of their backoff
-- (a retry's place in its rate limit's line is given again).
-- name: SetReadyAt :exec
UPDATE tasks SET ready_at = u.at, rate_at = NULL
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@ats::timestamptz[]) AS at) AS u
WHERE tasks.id = u.id AND tasks.admitted_at IS NULL;

-- AnyWaiting says whether the queue has a task eligible for admission now
-- (the admitter's cheap look before it takes the queue's lock).
-- name: AnyWaiting :one
SELECT EXISTS (
    SELECT 1 FROM tasks
    WHERE queue = @queue AND admitted_at IS NULL AND status IN ('queued', 'retrying') AND ready_at <= now()
)::bool;

-- QueueLoad is a queue's tasks holding slots, what they ask for together,
-- and whether any task waits in it, eligible now (dispatch.Direct,
-- dispatch.WaitReason).
-- name: QueueLoad :one
SELECT f.in_flight, f.cpu, f.memory, f.gpu, f.custom,
       EXISTS (SELECT 1 FROM tasks AS k WHERE k.queue = @queue AND k.admitted_at IS NULL
          AND k.status IN ('queued', 'retrying') AND k.ready_at <= now())::bool AS waiting
FROM (SELECT count(*)::bigint AS in_flight, COALESCE(sum(k.res_cpu), 0)::bigint AS cpu, COALESCE(sum(k.res_memory), 0)::bigint AS memory,
             COALESCE(sum(k.res_gpu), 0)::bigint AS gpu,
             jsonb_agg(k.res_custom) FILTER (WHERE k.res_custom IS NOT NULL) AS custom
      FROM tasks AS k WHERE k.queue = @queue AND k.admitted_at IS NOT NULL
        AND k.status IN ('queued', 'running', 'retrying')) AS f;

-- AdmissionWaiting counts, per queue, the tasks waiting for admission now
-- (a retry still in its backoff is not waiting yet) and how long the
-- oldest has waited: the metrics' view of the backlog River does not hold.
-- name: AdmissionWaiting :many
SELECT queue, count(*)::bigint AS waiting, COALESCE(EXTRACT(EPOCH FROM now() - min(ready_at)), 0)::float8 AS oldest_seconds
FROM tasks
WHERE admitted_at IS NULL AND status IN ('queued', 'retrying') AND ready_at <= now()
GROUP BY queue;

-- TaskSizes reads what tasks ask for (dispatch.Direct, for releases that
-- did not read it).
-- name: TaskSizes :many
SELECT id, res_cpu, res_memory, res_gpu, res_custom FROM tasks WHERE id = ANY(@ids::uuid[]);
