-- Notifications: webhooks for run finishes and alerts, written by the
-- watchdog and delivered by workers (package notify).

-- name: InsertNotifications :exec
INSERT INTO notifications (id, tenant_id, job_id, namespace, queue, event, run_id, alert_id, url, headers, secret, body,
                           trace_parent, status, next_attempt_at, created_at)
SELECT u.id, u.tenant_id, u.job_id, u.namespace, u.queue, u.event,
       NULLIF(u.run_id, '00000000-0000-0000-0000-000000000000'::uuid),
       NULLIF(u.alert_id, '00000000-0000-0000-0000-000000000000'::uuid),
       u.url, u.headers, u.secret, u.body, NULLIF(u.trace_parent, ''), 'pending', now(), now()
FROM (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@job_ids::uuid[]) AS job_id,
           unnest(@namespaces::text[]) AS namespace, unnest(@queues::text[]) AS queue, unnest(@events::text[]) AS event,
           unnest(@run_ids::uuid[]) AS run_id, unnest(@alert_ids::uuid[]) AS alert_id, unnest(@urls::text[]) AS url,
           unnest(@headers::jsonb[]) AS headers, unnest(@secrets::text[]) AS secret, unnest(@bodies::jsonb[]) AS body,
           unnest(@trace_parents::text[]) AS trace_parent
) AS u;

-- ClaimNotifications takes due deliveries of the queues for claim_seconds:
-- a worker that dies while delivering leaves them due again after that.
-- Each comes with its tenant's name, the scope (with its namespace) of the
-- secrets its headers may name.
-- name: ClaimNotifications :many
WITH c AS (
    UPDATE notifications SET attempts = attempts + 1, next_attempt_at = now() + INTERVAL '1 second' * @claim_seconds::float8
    WHERE id IN (
        SELECT n.id FROM notifications AS n
        WHERE n.status = 'pending' AND n.queue = ANY(@queues::text[]) AND n.next_attempt_at <= now()
        ORDER BY n.next_attempt_at, n.id
        LIMIT @batch
        FOR UPDATE SKIP LOCKED)
    RETURNING id, tenant_id, job_id, namespace, event, url, headers, secret, body, trace_parent, attempts
)
SELECT c.id, c.tenant_id, te.name AS tenant, c.job_id, c.namespace, c.event, c.url, c.headers, c.secret, c.body, c.trace_parent, c.attempts
FROM c JOIN tenants AS te ON te.id = c.tenant_id;

-- RecordDelivery writes one delivery's result if the claim is still the
-- caller's (same attempts count, still pending): a delivery whose claim
-- lapsed and was taken again records nothing.
-- name: RecordDelivery :execrows
UPDATE notifications
SET status = @status, last_status_code = sqlc.narg(status_code), last_error = @last_error,
    next_attempt_at = CASE WHEN @status = 'pending' THEN now() + INTERVAL '1 millisecond' * @retry_ms::float8 ELSE next_attempt_at END,
    finished_at = CASE WHEN @status = 'pending' THEN NULL ELSE now() END
WHERE id = @id AND attempts = @attempts AND status = 'pending';

-- name: ListNotifications :many
SELECT n.id, n.job_id, n.namespace, n.queue, n.event, n.run_id, n.alert_id, n.url, n.status, n.attempts,
       n.next_attempt_at, n.last_status_code, n.last_error, n.created_at, n.finished_at, j.name AS job_name
FROM notifications AS n JOIN jobs AS j ON j.id = n.job_id
WHERE n.tenant_id = @tenant_id
  AND (sqlc.narg(job_id)::uuid IS NULL OR n.job_id = sqlc.narg(job_id)::uuid)
  AND (@status::text = '' OR n.status = @status::text)
  AND (NOT @scoped::bool OR n.namespace = ANY(@scope_namespaces::text[])
       OR n.namespace || '/' || j.name = ANY(@scope_jobs::text[]))
  AND (n.created_at, n.id) < (@before_at::timestamptz, @before_id::uuid)
ORDER BY n.created_at DESC, n.id DESC
LIMIT @page_size;

-- name: PruneNotifications :execrows
DELETE FROM notifications WHERE id IN (
    SELECT id FROM notifications WHERE finished_at < now() - INTERVAL '1 second' * @older_than_seconds::float8
    ORDER BY finished_at LIMIT @batch);
