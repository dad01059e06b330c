-- name: InsertOutbox :exec
INSERT INTO dispatch_outbox (id, task_id, tenant_id, queue, priority, attempt, not_before, redelivers, created_at, need, reserve)
SELECT u.id, u.task_id, u.tenant_id, u.queue, u.priority, u.attempt, CASE WHEN u.not_before > '1970-01-01' THEN u.not_before END,
       u.redelivers, now(), NULLIF(u.need, '')::jsonb, u.reserve
FROM (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@task_ids::uuid[]) AS task_id, unnest(@tenant_ids::uuid[]) AS tenant_id,
           unnest(@queues::text[]) AS queue, unnest(@priorities::int[]) AS priority, unnest(@attempts::int[]) AS attempt,
           unnest(@not_befores::timestamptz[]) AS not_before, unnest(@redelivers::bigint[]) AS redelivers,
           unnest(@needs::text[]) AS need, unnest(@reserves::bool[]) AS reserve
) AS u;

-- PendingOutbox locks a batch of the rows of one queue database: those of
-- the given queues or, with others, of every queue but those, oldest
-- first. The queues with pending rows are found by a loose scan of
-- dispatch_outbox_queue (one probe per queue), each of ours read by an
-- index range of its own (a backlog of another database's queues is
-- never read); the oldest of those candidates are then locked, skipping
-- rows another relay holds, and the lock stops at the batch (LIMIT with
-- FOR UPDATE: only the rows returned are locked).
-- name: PendingOutbox :many
WITH RECURSIVE pending (queue) AS (
    (SELECT o.queue FROM dispatch_outbox AS o ORDER BY o.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT o.queue FROM dispatch_outbox AS o WHERE o.queue > pending.queue ORDER BY o.queue LIMIT 1)
    FROM pending WHERE pending.queue IS NOT NULL
), ours AS (
    SELECT pending.queue FROM pending
    WHERE pending.queue IS NOT NULL
      -- A bound queue (QUEUE|TENANT) lives where its queue does.
      AND CASE WHEN @others::bool THEN NOT (split_part(pending.queue, '|', 1) = ANY(@queues::text[])) ELSE split_part(pending.queue, '|', 1) = ANY(@queues::text[]) END
), candidates AS (
    SELECT c.id
    FROM ours
    CROSS JOIN LATERAL (
        SELECT o.id FROM dispatch_outbox AS o
        WHERE o.queue = ours.queue
        ORDER BY o.created_at, o.id
        LIMIT @batch
    ) AS c
)
SELECT o.id, o.task_id, o.tenant_id, o.queue, o.priority, o.attempt, o.not_before, o.redelivers, o.created_at, o.need, o.reserve
FROM dispatch_outbox AS o
WHERE o.id IN (SELECT candidates.id FROM candidates)
ORDER BY o.created_at, o.id
LIMIT @batch
FOR UPDATE SKIP LOCKED;

-- name: DeleteOutbox :exec
DELETE FROM dispatch_outbox WHERE id = ANY(@ids::uuid[]);

-- NotifyRiverInsert sends River's insert notification (its channel and
-- payload, as River's own client sends it) for each payload, in the
-- transaction that inserted the jobs: workers listening on the queue fetch
-- once it commits. See dispatch.notifyInserted.
-- name: NotifyRiverInsert :exec
SELECT pg_notify(current_schema() || '.river_insert', p)::text FROM unnest(@payloads::text[]) AS p;
