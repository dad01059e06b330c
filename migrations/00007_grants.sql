-- Grants and system admins. A principal's role on a job is the most
-- permissive of its key's tenant-wide role, its grant on the job's
-- namespace and its grant on the job. A key may carry no tenant-wide role
-- ('none') and act only where it was granted. A system admin key may also
-- create and list tenants and make keys in any tenant.

-- +goose Up
ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_role_check;
ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS check_role; -- CockroachDB's name for it
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role CHECK (role IN ('none', 'reader', 'editor', 'admin'));
ALTER TABLE api_keys ADD COLUMN system_admin BOOLEAN NOT NULL DEFAULT false;

-- job_name '' grants on the whole namespace.
CREATE TABLE grants (
    id         UUID PRIMARY KEY,
    tenant_id  UUID NOT NULL REFERENCES tenants (id),
    principal  TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    job_name   TEXT NOT NULL DEFAULT '',
    role       TEXT NOT NULL CHECK (role IN ('reader', 'editor', 'admin')),
    created_at TIMESTAMPTZ NOT NULL,
    created_by TEXT NOT NULL,
    UNIQUE (tenant_id, principal, namespace, job_name)
);
CREATE INDEX grants_namespace ON grants (tenant_id, namespace, job_name);

-- +goose Down
DROP TABLE grants;
ALTER TABLE api_keys DROP COLUMN system_admin;
ALTER TABLE api_keys DROP CONSTRAINT api_keys_role;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check CHECK (role IN ('reader', 'editor', 'admin'));
