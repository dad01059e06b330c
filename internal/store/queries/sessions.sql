-- name: InsertWebSession :exec
INSERT INTO web_sessions (hash, key_id, csrf, created_at, expires_at)
VALUES (@hash, @key_id, @csrf, now(), now() + INTERVAL '1 second' * @ttl_seconds::float8);

-- WebSessionByHash finds a live session whose key is live, with the key's
-- principal.
-- name: WebSessionByHash :one
SELECT s.csrf, s.expires_at, k.id AS key_id, k.tenant_id, t.name AS tenant_name, k.principal, k.role, k.system_admin,
       k.prefix, k.expires_at AS key_expires_at
FROM web_sessions AS s
JOIN api_keys AS k ON k.id = s.key_id
JOIN tenants AS t ON t.id = k.tenant_id
WHERE s.hash = @hash AND s.expires_at > now() AND k.role <> 'worker'
  AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now());

-- name: DeleteWebSession :exec
DELETE FROM web_sessions WHERE hash = @hash;

-- PruneWebSessions deletes up to 100 expired sessions.
-- name: PruneWebSessions :exec
DELETE FROM web_sessions
WHERE hash IN (SELECT hash FROM web_sessions WHERE expires_at < now() LIMIT 100);

-- TrimKeySessions ends the key's sessions beyond its newest @keep.
-- name: TrimKeySessions :exec
DELETE FROM web_sessions AS s
WHERE s.key_id = @key_id AND s.hash NOT IN (
    SELECT k.hash FROM web_sessions AS k WHERE k.key_id = @key_id ORDER BY k.created_at DESC LIMIT @keep
);
