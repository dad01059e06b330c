-- Events (docs/events.md): published to a tenant, they start the runs of
-- the jobs whose schedule.event names their type. An event's key (the
-- publisher's id) is taken once per tenant and source for as long as the
-- event is kept: a repeat answers the first. A pending event waits in its
-- shard for the scheduler node that holds it, which starts its runs and
-- marks it matched in one transaction.

-- +goose Up
CREATE TABLE events (
    id          UUID PRIMARY KEY,
    tenant_id   UUID NOT NULL REFERENCES tenants (id),
    source      TEXT NOT NULL DEFAULT '', -- '': published through the API
    event_key   TEXT NOT NULL,            -- the publisher's id of the event
    type        TEXT NOT NULL,
    data        JSONB NOT NULL,
    time        TIMESTAMPTZ NOT NULL,     -- when it happened (the publisher's, or its receipt)
    received_at TIMESTAMPTZ NOT NULL,
    shard       INT NOT NULL,
    pending     BOOLEAN NOT NULL DEFAULT true,
    -- an event its step could not take (an error that stays): set aside,
    -- tried again later, so that it holds up no other
    tries       INT NOT NULL DEFAULT 0,
    retry_at    TIMESTAMPTZ,
    last_error  TEXT NOT NULL DEFAULT '',
    UNIQUE (tenant_id, source, event_key)
);
CREATE INDEX events_pending ON events (shard, received_at) WHERE pending;
CREATE INDEX events_received ON events (received_at);

-- The event type each job's schedule.event names, kept with its
-- definition (as job_triggers for schedule.after).
CREATE TABLE job_events (
    job_id    UUID PRIMARY KEY REFERENCES jobs (id),
    tenant_id UUID NOT NULL,
    type      TEXT NOT NULL
);
CREATE INDEX job_events_type ON job_events (tenant_id, type);

-- A run an event started carries it (run.event) and its id: one run per
-- job and event, whatever path writes it.
ALTER TABLE runs ADD COLUMN event JSONB, ADD COLUMN event_id UUID;
CREATE UNIQUE INDEX runs_event ON runs (job_id, event_id) WHERE event_id IS NOT NULL;

ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_trigger_check;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check CHECK (trigger IN ('schedule', 'manual', 'backfill', 'replay', 'upstream', 'parent', 'event')) NOT VALID;
ALTER TABLE runs VALIDATE CONSTRAINT runs_trigger_check;

-- Publisher keys publish events and do nothing else.
ALTER TABLE api_keys DROP CONSTRAINT api_keys_role;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role CHECK (role IN ('none', 'reader', 'editor', 'admin', 'worker', 'publisher'));

-- +goose Down
-- Refused while publisher keys exist: revoke and delete them first.
ALTER TABLE api_keys DROP CONSTRAINT api_keys_role;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role CHECK (role IN ('none', 'reader', 'editor', 'admin', 'worker'));
-- Refused while runs of trigger event exist: they are history.
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_trigger_check;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check CHECK (trigger IN ('schedule', 'manual', 'backfill', 'replay', 'upstream', 'parent')) NOT VALID;
ALTER TABLE runs VALIDATE CONSTRAINT runs_trigger_check;
DROP INDEX runs_event;
ALTER TABLE runs DROP COLUMN event_id, DROP COLUMN event;
DROP TABLE job_events;
DROP TABLE events;
