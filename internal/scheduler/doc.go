// Package scheduler turns due schedules into runs, on the shards this node
// owns.
//
// Each pass asks the database, with one index probe per owned shard, for
// the earliest fire time of the shard's active jobs. The shards with a job
// due are fired together (in Config.Parallel groups): createRunsForDueJobs
// commits, in one transaction per batch of due jobs:
//
//   - the fencing check: this node still owns each shard at its epoch, with
//     a live lease (invariant 3); a shard that fails it is dropped at once
//     and the batch is retried without it;
//   - the due jobs of those shards, oldest first, their schedule rows
//     (job_schedules: the narrow table that holds each job's live next
//     fire time) locked, then their definitions read, not locked (a
//     definition change locks the jobs row, then the schedule row: see
//     store.GetJobForUpdate for why not FOR UPDATE; read after the lock,
//     a definition is the last committed one: see store DueJobs);
//   - for each, the plan: misfire policy (instants later than MisfireAfter
//     count as missed), then overlap policy against the job's active runs;
//   - the runs (skipped ones too, with the policy that skipped them: the
//     unique (job, instant) constraint is invariant 2), their tasks, the
//     River jobs of the root tasks, the cancellation of runs replaced by
//     cancel_previous, and each job's next fire time.
//
// Times come from the database's now(); this process's clock only paces
// the loop, so a node whose clock is off fires nothing early or late.
package scheduler
