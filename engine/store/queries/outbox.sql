-- name: InsertOutbox :exec
INSERT INTO dispatch_outbox (id, task_id, tenant_id, queue, priority, attempt, not_before, redelivers, created_at)
SELECT u.id, u.task_id, u.tenant_id, u.queue, u.priority, u.attempt, CASE WHEN u.not_before > '1970-01-01' THEN u.not_before END,
       u.redelivers, now()
FROM (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@task_ids::uuid[]) AS task_id, unnest(@tenant_ids::uuid[]) AS tenant_id,
           unnest(@queues::text[]) AS queue, unnest(@priorities::int[]) AS priority, unnest(@attempts::int[]) AS attempt,
           unnest(@not_befores::timestamptz[]) AS not_before, unnest(@redelivers::bigint[]) AS redelivers
) AS u;

-- PendingOutbox locks a batch of the rows of one queue database: those of
-- the given queues or, with others, of every queue but those.
-- name: PendingOutbox :many
SELECT * FROM dispatch_outbox
WHERE CASE WHEN @others::bool THEN NOT (queue = ANY(@queues::text[])) ELSE queue = ANY(@queues::text[]) END
ORDER BY created_at, id LIMIT @batch FOR UPDATE SKIP LOCKED;

-- name: DeleteOutbox :exec
DELETE FROM dispatch_outbox WHERE id = ANY(@ids::uuid[]);

-- NotifyRiverInsert sends River's insert notification (its channel and
-- payload, as River's own client sends it) for each payload, in the
-- transaction that inserted the jobs: workers listening on the queue fetch
-- once it commits. See dispatch.notifyInserted.
-- name: NotifyRiverInsert :exec
SELECT pg_notify(current_schema() || '.river_insert', p)::text FROM unnest(@payloads::text[]) AS p;
