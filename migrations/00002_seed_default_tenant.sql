-- Until authentication lands every call acts in the default tenant, and a
-- fresh cluster has 64 shards (fixed from here on).

-- +goose Up
INSERT INTO cluster_settings (id, shard_count) VALUES (1, 64) ON CONFLICT (id) DO NOTHING;
INSERT INTO tenants (id, name) VALUES ('00000000-0000-0000-0000-000000000001', 'default')
    ON CONFLICT (id) DO NOTHING;
INSERT INTO namespaces (tenant_id, name) VALUES ('00000000-0000-0000-0000-000000000001', 'default')
    ON CONFLICT (tenant_id, name) DO NOTHING;

-- +goose Down
DELETE FROM namespaces WHERE tenant_id = '00000000-0000-0000-0000-000000000001';
DELETE FROM tenants WHERE id = '00000000-0000-0000-0000-000000000001';
DELETE FROM cluster_settings WHERE id = 1;
