-- Execution state, filled by the scheduler, resolver and workers.

-- +goose Up
CREATE TABLE nodes (
    id               UUID PRIMARY KEY,
    name             TEXT NOT NULL,
    started_at       TIMESTAMPTZ NOT NULL,
    heartbeat_at     TIMESTAMPTZ NOT NULL,
    lease_expires_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE shards (
    id               INT PRIMARY KEY,
    owner_node       UUID,                -- NULL: unowned
    epoch            BIGINT NOT NULL DEFAULT 0,  -- bumped by every claim; fences writes
    lease_expires_at TIMESTAMPTZ,
    lag_seconds      DOUBLE PRECISION NOT NULL DEFAULT 0
);

CREATE TABLE runs (
    id            UUID PRIMARY KEY,
    tenant_id     UUID NOT NULL,
    job_id        UUID NOT NULL REFERENCES jobs (id),
    job_version   BIGINT NOT NULL,
    shard         INT NOT NULL,
    node_id       UUID,                   -- the node that fired it (NULL: an API trigger)
    shard_epoch   BIGINT,                 -- the shard epoch it was fired under
    scheduled_for TIMESTAMPTZ NOT NULL,   -- the instant this run is for
    trigger       TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'backfill', 'replay')),
    -- queued: held back by overlap: queue until the previous run ends
    status        TEXT NOT NULL CHECK (status IN ('queued', 'pending', 'running', 'succeeded', 'failed', 'skipped', 'cancelled', 'dead_lettered')),
    reason        TEXT NOT NULL DEFAULT '', -- why skipped / cancelled / failed
    created_at    TIMESTAMPTZ NOT NULL,
    started_at    TIMESTAMPTZ,
    finished_at   TIMESTAMPTZ,
    UNIQUE (job_id, scheduled_for)        -- invariant 2: one run per (job, instant)
);
CREATE INDEX runs_tenant_job ON runs (tenant_id, job_id, scheduled_for DESC);
-- Unfinished runs of a job (overlap policy). The predicate is on
-- finished_at, not status, so that pending -> running stays a HOT update.
CREATE INDEX runs_active ON runs (job_id, scheduled_for) WHERE finished_at IS NULL;
CREATE INDEX runs_tenant_time ON runs (tenant_id, scheduled_for DESC, id);

CREATE TABLE tasks (
    id                UUID PRIMARY KEY,
    tenant_id         UUID NOT NULL,
    run_id            UUID NOT NULL REFERENCES runs (id),
    step              TEXT NOT NULL,
    -- waiting: parents not done; queued: handed to River; retrying: a new
    -- River job waits for its backoff; the rest are terminal.
    status            TEXT NOT NULL CHECK (status IN ('waiting', 'queued', 'running', 'retrying', 'succeeded', 'failed', 'upstream_failed', 'cancelled', 'dead_lettered')),
    parents_remaining INT NOT NULL CHECK (parents_remaining >= 0),
    queue             TEXT NOT NULL,
    priority          INT NOT NULL,
    attempt           INT NOT NULL DEFAULT 0,
    fencing_token     BIGINT NOT NULL DEFAULT 0, -- bumped for every attempt; stale reports are rejected
    lease_owner       TEXT,
    lease_expires_at  TIMESTAMPTZ,
    trigger_rule      TEXT NOT NULL DEFAULT 'all_success',
    last_error        TEXT NOT NULL DEFAULT '',
    created_at        TIMESTAMPTZ NOT NULL,
    released_at       TIMESTAMPTZ,             -- handed to River (first time)
    started_at        TIMESTAMPTZ,             -- first attempt started
    finished_at       TIMESTAMPTZ,
    UNIQUE (run_id, step)
);
CREATE INDEX tasks_lease ON tasks (lease_expires_at) WHERE status = 'running';
CREATE INDEX tasks_dead ON tasks (tenant_id, finished_at DESC, id) WHERE status = 'dead_lettered';

-- Which tasks wait on which: the resolver decrements children's
-- parents_remaining when a parent succeeds.
CREATE TABLE task_edges (
    parent_id UUID NOT NULL REFERENCES tasks (id),
    child_id  UUID NOT NULL REFERENCES tasks (id),
    PRIMARY KEY (parent_id, child_id)
);

CREATE TABLE attempts (
    id            UUID PRIMARY KEY,
    task_id       UUID NOT NULL REFERENCES tasks (id),
    tenant_id     UUID NOT NULL,
    number        INT NOT NULL,
    fencing_token BIGINT NOT NULL,
    worker        TEXT NOT NULL,
    started_at    TIMESTAMPTZ NOT NULL,
    finished_at   TIMESTAMPTZ,
    outcome       TEXT NOT NULL DEFAULT 'running', -- running, succeeded, failed, rejected_stale
    exit_reason   TEXT NOT NULL DEFAULT '',  -- error, timeout, lease_expired, cancelled, http_4xx, http_5xx, exit_code
    failure_class TEXT NOT NULL DEFAULT '',  -- user, system
    error         TEXT NOT NULL DEFAULT '',
    output        TEXT NOT NULL DEFAULT '',
    -- A report that arrived after the attempt lost its lease: rejected
    -- (invariant 5), kept here for the record.
    late_outcome  TEXT NOT NULL DEFAULT '',
    late_error    TEXT NOT NULL DEFAULT '',
    late_at       TIMESTAMPTZ,
    UNIQUE (task_id, number)
);

-- When River's tables live in another database than Orrery's state, a
-- release is recorded here in the state transaction and relayed to River
-- afterwards (River's unique key on task and attempt dedupes a replay).
CREATE TABLE dispatch_outbox (
    id         UUID PRIMARY KEY,
    task_id    UUID NOT NULL,
    tenant_id  UUID NOT NULL,
    queue      TEXT NOT NULL,
    priority   INT NOT NULL,
    attempt    INT NOT NULL,
    not_before TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX dispatch_outbox_created ON dispatch_outbox (created_at, id);

-- +goose Down
DROP TABLE dispatch_outbox;
DROP TABLE attempts;
DROP TABLE task_edges;
DROP TABLE tasks;
DROP TABLE runs;
DROP TABLE shards;
DROP TABLE nodes;
