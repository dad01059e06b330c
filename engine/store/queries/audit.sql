-- name: InsertAudit :exec
INSERT INTO audit_log (id, tenant_id, at, actor, action, target_kind, target_id, target_name, before, after)
VALUES (@id, @tenant_id, now(), @actor, @action, @target_kind, @target_id, @target_name, @before, @after);

-- name: ListAuditForTarget :many
SELECT * FROM audit_log
WHERE tenant_id = @tenant_id AND target_id = @target_id
ORDER BY at, id;

-- name: GetTriggerKey :one
SELECT request_hash, response FROM idempotency_keys
WHERE tenant_id = @tenant_id AND operation = 'TriggerJob' AND key = @key;

-- name: InsertTriggerKey :exec
INSERT INTO idempotency_keys (tenant_id, operation, key, request_hash, response, created_at)
VALUES (@tenant_id, 'TriggerJob', @key, @request_hash, @response, now());
