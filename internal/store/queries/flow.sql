-- Step-level concurrency keys (docs/flow-control.md, "Step level";
-- migrations/00050_step_concurrency_keys.sql). The key locks are
-- LockConcurrencyKeys' (runs.sql), on "step/TENANT/VALUE".

-- FlowHolders counts, for each (@tenant_ids[i], @keys[i]), the tasks
-- holding the key: keyed, not held, queued, running or retrying.
-- name: FlowHolders :many
SELECT q.tenant_id::uuid AS tenant_id, q.key::text AS key, (SELECT count(*) FROM tasks AS t
    WHERE t.flow_keys @> ARRAY[q.key] AND t.tenant_id = q.tenant_id
      AND t.flow_keys IS NOT NULL AND t.flow_wait IS NULL AND t.status IN ('queued', 'running', 'retrying'))::int AS n
FROM (SELECT DISTINCT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@keys::text[]) AS key) AS q;

-- KeyTasks holds tasks being released (waiting, with no parent left) on
-- a key, @waits[i] for task @ids[i], with their keys (@keys[i] and
-- @limits[i]: JSON lists of its values and limits, in order): they stay
-- waiting, seen by no admission, start or offer, until a promotion
-- releases them (SetFlowWaits).
-- name: KeyTasks :exec
UPDATE tasks SET flow_keys = ARRAY(SELECT e.v FROM jsonb_array_elements_text(u.keys::jsonb) WITH ORDINALITY AS e (v, n) ORDER BY e.n),
    flow_limits = ARRAY(SELECT e.v::int FROM jsonb_array_elements_text(u.limits::jsonb) WITH ORDINALITY AS e (v, n) ORDER BY e.n),
    flow_wait = u.wait
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@keys::text[]) AS keys, unnest(@limits::text[]) AS limits,
             unnest(@waits::text[]) AS wait) AS u
WHERE tasks.id = u.id AND tasks.status = 'waiting';

-- HeldOnKey reads the oldest tasks held on a key after task @after (a
-- page: the zero id for the first), at most @n, skipping any another
-- transaction holds (a cancel: no wait, no lock cycle).
-- name: HeldOnKey :many
SELECT id, tenant_id, run_id, queue, priority, attempt, flow_keys::text[] AS flow_keys, flow_limits::int[] AS flow_limits,
       res_cpu, res_memory, res_gpu, res_custom
FROM tasks
WHERE tenant_id = @tenant_id AND flow_wait = @key::text AND status = 'waiting' AND parents_remaining = 0 AND id > @after::uuid
ORDER BY id
LIMIT @n
FOR UPDATE SKIP LOCKED;

-- SetFlowWaits moves held tasks: @waits[i] empty releases task @ids[i]
-- (queued, eligible for admission now, as ReleaseTasks), else it waits
-- for that key.
-- name: SetFlowWaits :exec
UPDATE tasks SET flow_wait = NULLIF(u.wait, ''),
    status = CASE WHEN u.wait = '' THEN 'queued' ELSE tasks.status END,
    admitted_at = CASE WHEN u.wait = '' THEN NULL ELSE tasks.admitted_at END,
    released_at = CASE WHEN u.wait = '' THEN COALESCE(tasks.released_at, now()) ELSE tasks.released_at END,
    ready_at = CASE WHEN u.wait = '' THEN now() ELSE tasks.ready_at END
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@waits::text[]) AS wait) AS u
WHERE tasks.id = u.id AND tasks.flow_wait IS NOT NULL AND tasks.status = 'waiting' AND tasks.parents_remaining = 0;

-- HeldKeys lists the keys tasks are held on after (@tenant_id, @key), in
-- (tenant, key) order, at most @n, each with its oldest held task's keys
-- and limits (the reaper's look for held tasks whose key has room: a
-- loose index scan, one probe a key).
-- name: HeldKeys :many
WITH RECURSIVE k AS (
    (SELECT t.tenant_id, t.flow_wait, t.flow_keys, t.flow_limits FROM tasks AS t
     WHERE t.flow_wait IS NOT NULL AND t.status = 'waiting' AND (t.tenant_id, t.flow_wait) > (@tenant_id::uuid, @key::text)
     ORDER BY t.tenant_id, t.flow_wait, t.id LIMIT 1)
    UNION ALL
    SELECT n.tenant_id, n.flow_wait, n.flow_keys, n.flow_limits FROM k CROSS JOIN LATERAL (
        SELECT t.tenant_id, t.flow_wait, t.flow_keys, t.flow_limits FROM tasks AS t
        WHERE t.flow_wait IS NOT NULL AND t.status = 'waiting' AND (t.tenant_id, t.flow_wait) > (k.tenant_id, k.flow_wait)
        ORDER BY t.tenant_id, t.flow_wait, t.id LIMIT 1) AS n
)
SELECT k.tenant_id::uuid AS tenant_id, k.flow_wait::text AS key, k.flow_keys::text[] AS flow_keys, k.flow_limits::int[] AS flow_limits
FROM k LIMIT @n;

-- TryLockKeys takes the locks of @keys that no other transaction holds,
-- in key order, and returns those it took (the reaper's: it waits for none).
-- name: TryLockKeys :many
SELECT s.k::text AS key FROM (SELECT DISTINCT unnest(@keys::text[]) AS k ORDER BY 1) AS s
WHERE pg_try_advisory_xact_lock(hashtextextended(s.k, 8191));

-- BusiestKeys are the keys the most tasks or runs wait for, at most @n
-- (of every tenant with @all_tenants, else of @tenant_id's), each with
-- how many wait, how long the oldest has waited (since its release or
-- creation), and how many keys of its kind have one waiting (keys_waiting):
-- step concurrency keys (tasks held, by flow_wait), rate limits (tasks in
-- a key's line, their place ahead) and job concurrency keys (runs queued
-- for their keys: "JOB VALUE").
-- name: BusiestKeys :many
SELECT w.kind::text AS kind, w.tenant_id::uuid AS tenant_id, te.name AS tenant, w.key::text AS key, w.waiting::bigint AS waiting,
       w.oldest_seconds::float8 AS oldest_seconds, (count(*) OVER (PARTITION BY w.kind))::bigint AS keys_waiting
FROM (
    SELECT 'concurrency' AS kind, t.tenant_id, t.flow_wait AS key, count(*) AS waiting,
           EXTRACT(EPOCH FROM now() - min(COALESCE(t.released_at, t.created_at))) AS oldest_seconds
    FROM tasks AS t
    WHERE t.flow_wait IS NOT NULL AND t.status = 'waiting' AND (@all_tenants::bool OR t.tenant_id = @tenant_id::uuid)
    GROUP BY t.tenant_id, t.flow_wait
    UNION ALL
    SELECT 'rate', t.tenant_id, t.rate_key, count(*), EXTRACT(EPOCH FROM now() - min(COALESCE(t.released_at, t.created_at)))
    FROM tasks AS t
    WHERE t.rate_key IS NOT NULL AND t.rate_at IS NOT NULL AND t.admitted_at IS NULL AND t.status IN ('queued', 'retrying')
      AND t.ready_at > now() AND (@all_tenants::bool OR t.tenant_id = @tenant_id::uuid)
    GROUP BY t.tenant_id, t.rate_key
    UNION ALL
    SELECT 'job', r.tenant_id, j.name || ' ' || split_part(k.key, '/', 3), count(*), EXTRACT(EPOCH FROM now() - min(r.created_at))
    FROM runs AS r JOIN jobs AS j ON j.id = r.job_id CROSS JOIN LATERAL unnest(r.concurrency_keys) AS k (key)
    WHERE r.held AND r.status = 'queued' AND r.finished_at IS NULL AND r.concurrency_keys IS NOT NULL
      AND (@all_tenants::bool OR r.tenant_id = @tenant_id::uuid)
    GROUP BY r.tenant_id, j.name, k.key
) AS w JOIN tenants AS te ON te.id = w.tenant_id
ORDER BY w.waiting DESC, w.oldest_seconds DESC, w.kind, w.key
LIMIT @n;
