-- name: InsertAudit :exec
INSERT INTO audit_log (id, tenant_id, at, actor, action, target_kind, target_id, target_name, before, after)
VALUES (@id, @tenant_id, now(), @actor, @action, @target_kind, @target_id, @target_name, @before, @after);

-- name: ListAuditForTarget :many
SELECT * FROM audit_log
WHERE tenant_id = @tenant_id AND target_id = @target_id
ORDER BY at, id;

-- ListAudit pages through a tenant's audit trail, newest first, by
-- (at, id) keyset: the rows strictly before (before_at, before_id). Unset
-- filters (NULL) do not filter. actor matches an actor exactly, or the
-- principal's name of "NAME (KEY_PREFIX)" ("ci" matches "ci (ork_ab12cd34)",
-- not "ci (x) (ork_ab12cd34)"). `at <= before_at` lets the scan of
-- audit_log_tenant_at start at the page; rows of one transaction share
-- their `at` and are ordered by id (UUIDv7, in the order written).
-- The page is cut where its entries' before and after pass @budget bytes
-- (as JSON text; the first entry whatever its size): page_rows is how many
-- entries the page held before the cut, so that the caller knows more
-- follow.
-- name: ListAudit :many
WITH page AS (
    SELECT id, at, actor, action, target_kind, target_id, target_name, before, after
    FROM audit_log
    WHERE tenant_id = @tenant_id
      AND (sqlc.narg(actor)::text IS NULL OR actor = sqlc.narg(actor)::text
           OR (left(actor, length(sqlc.narg(actor)::text) + 2) = sqlc.narg(actor)::text || ' ('
               AND right(actor, 1) = ')' AND strpos(substr(actor, length(sqlc.narg(actor)::text) + 3), ' ') = 0))
      AND (sqlc.narg(action)::text IS NULL OR action = sqlc.narg(action)::text)
      AND (sqlc.narg(target_kind)::text IS NULL OR target_kind = sqlc.narg(target_kind)::text)
      AND (sqlc.narg(target_id)::uuid IS NULL OR target_id = sqlc.narg(target_id)::uuid)
      AND (sqlc.narg(target_name)::text IS NULL OR target_name = sqlc.narg(target_name)::text)
      AND (sqlc.narg(since)::timestamptz IS NULL OR at >= sqlc.narg(since)::timestamptz)
      AND (sqlc.narg(until)::timestamptz IS NULL OR at < sqlc.narg(until)::timestamptz)
      AND at <= @before_at::timestamptz
      AND (at < @before_at::timestamptz OR id < @before_id::uuid)
    ORDER BY at DESC, id DESC
    LIMIT @page_size
), sized AS (
    SELECT page.*,
           (COALESCE(octet_length(page.before::text), 0) + COALESCE(octet_length(page.after::text), 0))::bigint AS bytes,
           count(*) OVER ()::bigint AS page_rows
    FROM page
), summed AS (
    SELECT sized.*, sum(sized.bytes) OVER (ORDER BY sized.at DESC, sized.id DESC)::bigint AS upto FROM sized
)
SELECT summed.id, summed.at, summed.actor, summed.action, summed.target_kind, summed.target_id, summed.target_name,
       summed.before, summed.after, summed.page_rows
FROM summed
WHERE summed.upto - summed.bytes < @budget::bigint
ORDER BY summed.at DESC, summed.id DESC;

-- name: GetTriggerKey :one
SELECT request_hash, response FROM idempotency_keys
WHERE tenant_id = @tenant_id AND operation = 'TriggerJob' AND key = @key;

-- name: InsertTriggerKey :exec
INSERT INTO idempotency_keys (tenant_id, operation, key, request_hash, response, created_at)
VALUES (@tenant_id, 'TriggerJob', @key, @request_hash, @response, now());
