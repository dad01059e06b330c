-- BindQueues binds queues of tenants to their bound queues; a binding that
-- exists already is kept. It returns the bindings it made.
-- name: BindQueues :many
INSERT INTO queue_bindings (tenant_id, queue, bound_queue, bound_by)
SELECT b.tenant_id, b.queue, b.bound_queue, @bound_by::text
FROM (SELECT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@queues::text[]) AS queue, unnest(@bound_queues::text[]) AS bound_queue) AS b
ON CONFLICT (tenant_id, queue) DO NOTHING
RETURNING tenant_id, queue, bound_queue;

-- QueueBindingsOf reads the bindings of some tenants.
-- name: QueueBindingsOf :many
SELECT tenant_id, queue, bound_queue FROM queue_bindings WHERE tenant_id = ANY(@tenant_ids::uuid[]);

-- name: UnbindQueue :one
DELETE FROM queue_bindings WHERE tenant_id = @tenant_id AND queue = @queue
RETURNING bound_queue;

-- name: ListQueueBindings :many
SELECT b.queue, b.bound_queue, b.bound_by, b.created_at, t.name AS tenant
FROM queue_bindings AS b JOIN tenants AS t ON t.id = b.tenant_id
ORDER BY t.name, b.queue;
