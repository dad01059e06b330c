-- What a worker has (docs/resources.md): the capacity a worker process
-- (--capacity, by default its machine's) or a remote worker (its claims'
-- capacity) declares, renewed with its lease. NULL: none declared (a
-- remote worker of an older client), which takes tasks by its slots only.

-- +goose Up
ALTER TABLE workers ADD COLUMN IF NOT EXISTS cap_cpu BIGINT;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS cap_memory BIGINT;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS cap_gpu BIGINT;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS cap_custom JSONB;

-- +goose Down
ALTER TABLE workers DROP COLUMN IF EXISTS cap_custom;
ALTER TABLE workers DROP COLUMN IF EXISTS cap_gpu;
ALTER TABLE workers DROP COLUMN IF EXISTS cap_memory;
ALTER TABLE workers DROP COLUMN IF EXISTS cap_cpu;
