-- Step-level rate limits (docs/flow-control.md, "Rate limits"): a step
-- with rate_limit carries its key's value (rate_key, the tenant's: every
-- job naming a value shares its bucket), its limit and period, written at
-- its release. Each admission of one of its attempts spends a token of the
-- key's bucket (rate_buckets), decided by the admission pass that admits
-- it, in its transaction, under the key's advisory lock: the bucket is a
-- theoretical arrival time (tat, GCRA: a task may start when tat - per +
-- per/limit is not after now), so a crashed pass spent nothing. A task
-- refused a token waits with the time its turn comes as its ready_at (and
-- rate_at: the place in the key's line it was given; once admitted, the
-- instant it spent its token); tail is the last such place, so later
-- tasks of the key wait behind it. A bucket whose tat
-- and tail are past is full and has no line, as one that does not exist:
-- the reaper deletes it.
--
-- tasks_rate_waiting reads a key's tasks waiting for admission: those not
-- lined up yet (rate_at NULL: a refused key's are given their places a
-- page at a time), and the last place a task waits in (the line's end).

-- +goose Up
ALTER TABLE tasks ADD COLUMN rate_key TEXT;
ALTER TABLE tasks ADD COLUMN rate_limit INT;
ALTER TABLE tasks ADD COLUMN rate_per_ms BIGINT;
ALTER TABLE tasks ADD COLUMN rate_at TIMESTAMPTZ;
CREATE INDEX tasks_rate_waiting ON tasks (tenant_id, rate_key, rate_at)
    WHERE rate_key IS NOT NULL AND admitted_at IS NULL AND status IN ('queued', 'retrying');
CREATE TABLE rate_buckets (
    tenant_id UUID NOT NULL REFERENCES tenants (id),
    key       TEXT NOT NULL,
    tat       TIMESTAMPTZ NOT NULL,
    tail      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, key)
);

-- +goose Down
DROP TABLE rate_buckets;
DROP INDEX tasks_rate_waiting;
ALTER TABLE tasks DROP COLUMN rate_at;
ALTER TABLE tasks DROP COLUMN rate_per_ms;
ALTER TABLE tasks DROP COLUMN rate_limit;
ALTER TABLE tasks DROP COLUMN rate_key;
