-- A tenant's bound on the items of one fan-out (for_each): 0 takes the
-- default (dag.MaxItems, 10,000), else 1 to 100,000 (SetTenantQuota's
-- max_items_per_step). Read where a fan-out expands.

-- +goose Up
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_items_per_step INT NOT NULL DEFAULT 0
    CHECK (max_items_per_step >= 0 AND max_items_per_step <= 100000);

-- +goose Down
ALTER TABLE tenants DROP COLUMN IF EXISTS max_items_per_step;
