-- name: InsertAudit :exec
INSERT INTO audit_log (id, tenant_id, at, actor, action, target_kind, target_id, target_name, before, after)
VALUES (@id, @tenant_id, now(), @actor, @action, @target_kind, @target_id, @target_name, @before, @after);

-- name: ListAuditForTarget :many
SELECT * FROM audit_log
WHERE tenant_id = @tenant_id AND target_id = @target_id
ORDER BY at, id;
