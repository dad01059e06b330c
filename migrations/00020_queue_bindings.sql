-- Worker pools bound to tenants (orrery worker --tenant NAME): a bound
-- pool serves each of its queues for its tenants only, through a queue of
-- each tenant's own, QUEUE|TENANT. A binding routes every task (and
-- notification) of the tenant in that queue made afterwards to its bound
-- queue, whether or not a bound worker is alive, so that the shared pool
-- of the queue never runs them; tenants without a binding keep the
-- shared queue. Bound pools write their bindings when they start;
-- `orrery queues unbind` removes one.

-- +goose Up
CREATE TABLE queue_bindings (
    tenant_id   UUID NOT NULL REFERENCES tenants (id),
    queue       TEXT NOT NULL,
    bound_queue TEXT NOT NULL UNIQUE,
    bound_by    TEXT NOT NULL,  -- the worker that bound it
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, queue)
);
-- The tenants a worker is bound to (names; empty: a shared worker).
ALTER TABLE workers ADD COLUMN tenants JSONB NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE workers DROP COLUMN tenants;
DROP TABLE queue_bindings;
