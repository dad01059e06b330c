-- Orrery's control-plane tables: tenants, namespaces, job definitions and
-- their versions, the audit trail and idempotency keys. Portable SQL: the
-- same statements run on PostgreSQL 15+ and CockroachDB (UUID keys, no
-- sequences, no triggers, no advisory locks).

-- +goose Up
CREATE TABLE cluster_settings (
    id          INT PRIMARY KEY CHECK (id = 1),
    shard_count INT NOT NULL CHECK (shard_count > 0),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE tenants (
    id              UUID PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    weight          INT NOT NULL DEFAULT 1 CHECK (weight > 0),
    max_concurrency INT NOT NULL DEFAULT 0 CHECK (max_concurrency >= 0), -- 0: no quota
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE namespaces (
    tenant_id  UUID NOT NULL REFERENCES tenants (id),
    name       TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE jobs (
    id           UUID PRIMARY KEY,
    tenant_id    UUID NOT NULL,
    namespace    TEXT NOT NULL,
    name         TEXT NOT NULL,
    description  TEXT NOT NULL DEFAULT '',
    labels       JSONB NOT NULL DEFAULT '{}',
    status       TEXT NOT NULL CHECK (status IN ('active', 'paused', 'deleted')),
    version      BIGINT NOT NULL CHECK (version > 0),
    spec         JSONB NOT NULL,            -- dag.JobSpec, normalized
    source       JSONB,                     -- where `orrery apply` read it: {path, commit}; NULL if not applied from files
    shard        INT NOT NULL,              -- shard.Of(id, cluster_settings.shard_count)
    next_fire_at TIMESTAMPTZ,               -- NULL: nothing left to fire (or not active)
    created_at   TIMESTAMPTZ NOT NULL,
    created_by   TEXT NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL,
    updated_by   TEXT NOT NULL,
    deleted_at   TIMESTAMPTZ,
    FOREIGN KEY (tenant_id, namespace) REFERENCES namespaces (tenant_id, name)
);
-- A name is taken only while its job is not deleted; deleted jobs keep their history.
CREATE UNIQUE INDEX jobs_live_name ON jobs (tenant_id, namespace, name) WHERE status <> 'deleted';
-- ListJobs pages by (name, id) inside a tenant.
CREATE INDEX jobs_tenant_name ON jobs (tenant_id, name, id);
-- The scheduler's range scan: due jobs of one shard.
CREATE INDEX jobs_due ON jobs (shard, next_fire_at) WHERE status = 'active' AND next_fire_at IS NOT NULL;

CREATE TABLE job_versions (
    job_id      UUID NOT NULL REFERENCES jobs (id),
    version     BIGINT NOT NULL,
    tenant_id   UUID NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    labels      JSONB NOT NULL DEFAULT '{}',
    spec        JSONB NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (job_id, version)
);

CREATE TABLE audit_log (
    id          UUID PRIMARY KEY,
    tenant_id   UUID NOT NULL,
    at          TIMESTAMPTZ NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,             -- create, update, delete, pause, resume, ...
    target_kind TEXT NOT NULL,             -- job, run, grant, quota, ...
    target_id   UUID NOT NULL,
    target_name TEXT NOT NULL DEFAULT '',
    before      JSONB,                     -- NULL on create
    after       JSONB                      -- NULL on hard delete
);
CREATE INDEX audit_log_tenant_at ON audit_log (tenant_id, at DESC, id);
CREATE INDEX audit_log_target ON audit_log (target_id, at DESC);

CREATE TABLE idempotency_keys (
    tenant_id    UUID NOT NULL,
    operation    TEXT NOT NULL,            -- the RPC the key belongs to
    key          TEXT NOT NULL,
    request_hash BYTEA NOT NULL,
    response     JSONB NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, operation, key)
);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE audit_log;
DROP TABLE job_versions;
DROP TABLE jobs;
DROP TABLE namespaces;
DROP TABLE tenants;
DROP TABLE cluster_settings;
