-- Alerts, run-finish events and notifications (see package watchdog and
-- package notify).
--
-- runs.watched marks the runs of jobs with alerts or callbacks, set when
-- the run is created. runs_watched finds the open ones per shard; it is
-- partial on columns the start of a run does not change, so starting a
-- run stays a HOT update. run_finishes receives, in the transaction that
-- finishes a watched run, one row the watchdog turns into alerts and
-- callbacks; it is a queue and stays small.

-- +goose Up
ALTER TABLE runs ADD COLUMN watched BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX runs_watched ON runs (shard, scheduled_for) WHERE watched AND finished_at IS NULL;

CREATE TABLE run_finishes (
    run_id      UUID PRIMARY KEY,
    shard       INT NOT NULL,
    status      TEXT NOT NULL,
    finished_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX run_finishes_shard ON run_finishes (shard, finished_at);

CREATE TABLE alerts (
    id            UUID PRIMARY KEY,
    tenant_id     UUID NOT NULL,
    job_id        UUID NOT NULL REFERENCES jobs (id),
    shard         INT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('missed', 'stuck', 'failure', 'dead_letter')),
    -- What raised it; one alert per (job, cause): the instant, the run or the attempt.
    cause         TEXT NOT NULL,
    run_id        UUID,
    attempt_id    UUID,
    scheduled_for TIMESTAMPTZ,
    message       TEXT NOT NULL,
    raised_at     TIMESTAMPTZ NOT NULL,
    resolved_at   TIMESTAMPTZ,
    resolution    TEXT NOT NULL DEFAULT '',
    UNIQUE (job_id, cause)
);
CREATE INDEX alerts_open ON alerts (shard) WHERE resolved_at IS NULL;
CREATE INDEX alerts_tenant ON alerts (tenant_id, raised_at DESC, id);
CREATE INDEX alerts_resolved ON alerts (resolved_at) WHERE resolved_at IS NOT NULL;

CREATE TABLE notifications (
    id               UUID PRIMARY KEY,
    tenant_id        UUID NOT NULL,
    job_id           UUID NOT NULL,
    namespace        TEXT NOT NULL,
    -- Delivered by the workers of this queue (their egress and secret policy).
    queue            TEXT NOT NULL,
    event            TEXT NOT NULL, -- run.succeeded, run.failed, run.cancelled, alert.raised, alert.resolved
    run_id           UUID,
    alert_id         UUID,
    url              TEXT NOT NULL,
    headers          JSONB NOT NULL DEFAULT '{}',
    secret           TEXT NOT NULL DEFAULT '',
    body             JSONB NOT NULL,
    trace_parent     TEXT,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INT NOT NULL DEFAULT 0,
    -- Due time while pending; while a worker delivers, the end of its claim.
    next_attempt_at  TIMESTAMPTZ NOT NULL,
    last_status_code INT,
    last_error       TEXT NOT NULL DEFAULT '',
    created_at       TIMESTAMPTZ NOT NULL,
    finished_at      TIMESTAMPTZ
);
CREATE INDEX notifications_due ON notifications (queue, next_attempt_at) WHERE status = 'pending';
CREATE INDEX notifications_tenant ON notifications (tenant_id, created_at DESC, id);
CREATE INDEX notifications_finished ON notifications (finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP TABLE notifications;
DROP TABLE alerts;
DROP TABLE run_finishes;
DROP INDEX runs_watched;
ALTER TABLE runs DROP COLUMN watched;
