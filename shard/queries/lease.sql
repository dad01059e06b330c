-- name: ShardCount :one
SELECT shard_count FROM cluster_settings WHERE id = 1;

-- name: EnsureShards :exec
INSERT INTO shards (id, epoch)
SELECT g.id, 0 FROM generate_series(0, @last_id::int) AS g (id)
ON CONFLICT (id) DO NOTHING;

-- Heartbeat registers the node or renews its lease, and returns the
-- database's clock.
-- name: Heartbeat :one
INSERT INTO nodes (id, name, started_at, heartbeat_at, lease_expires_at)
VALUES (@id, @name, now(), now(), now() + INTERVAL '1 second' * @ttl_seconds::float8)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), lease_expires_at = excluded.lease_expires_at
RETURNING now()::timestamptz AS now;

-- LiveNodes lists nodes whose lease has not lapsed, in id order.
-- name: LiveNodes :many
SELECT id FROM nodes WHERE lease_expires_at > now() ORDER BY id;

-- RenewShards extends the leases of the shards this node still owns at the
-- epochs it claimed them with, and returns them: a shard missing from the
-- answer is lost.
-- name: RenewShards :many
UPDATE shards
SET lease_expires_at = now() + INTERVAL '1 second' * @ttl_seconds::float8
WHERE owner_node = @node AND lease_expires_at > now()
  AND (id, epoch) IN (SELECT unnest(@ids::int[]), unnest(@epochs::bigint[]))
RETURNING id, epoch;

-- ClaimShards takes up to @max shards that nobody holds (never owned,
-- released, or whose owner's lease lapsed), bumping each one's epoch.
-- name: ClaimShards :many
UPDATE shards
SET owner_node = @node, epoch = epoch + 1,
    lease_expires_at = now() + INTERVAL '1 second' * @ttl_seconds::float8
WHERE id IN (
    SELECT s.id FROM shards AS s
    WHERE s.owner_node IS NULL OR s.lease_expires_at IS NULL OR s.lease_expires_at <= now()
    ORDER BY s.id
    LIMIT @max
    FOR UPDATE SKIP LOCKED
)
RETURNING id, epoch;

-- ReleaseShards gives shards back so that a node with too few can claim them.
-- name: ReleaseShards :exec
UPDATE shards SET owner_node = NULL, lease_expires_at = NULL
WHERE owner_node = @node AND id = ANY(@ids::int[]);

-- name: ListShards :many
SELECT s.id, s.owner_node, s.epoch, s.lease_expires_at, s.lag_seconds, n.name AS owner_name
FROM shards AS s LEFT JOIN nodes AS n ON n.id = s.owner_node
ORDER BY s.id;

-- name: ListNodes :many
SELECT id, name, started_at, heartbeat_at, lease_expires_at, lease_expires_at > now() AS live
FROM nodes ORDER BY name, id;

-- name: ForgetNode :exec
UPDATE nodes SET lease_expires_at = now() WHERE id = @id;

-- Fence returns those of the given leases (shard and epoch) that this node
-- still holds, unexpired, and locks their rows until the transaction ends,
-- so that no claim takes the shards before then. FOR KEY SHARE keeps a
-- claim (which locks FOR UPDATE) off the shard under READ COMMITTED too,
-- while the owner's lease renewals (plain updates) go on without waiting:
-- FOR SHARE made every renewal queue behind the fenced transactions, and
-- every fenced transaction behind that renewal. Under SERIALIZABLE the
-- claim and this read conflict anyway.
-- name: Fence :many
SELECT id, epoch FROM shards
WHERE owner_node = @node::uuid AND lease_expires_at > now()
  AND (id, epoch) IN (SELECT unnest(@ids::int[]), unnest(@epochs::bigint[]))
FOR KEY SHARE;
