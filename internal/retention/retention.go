// Package retention prunes old run history: finished runs, with their
// tasks, edges and attempts, older than a retention (default 7 days; a
// tenant may override it: tenants.run_retention_seconds), optionally
// archived first as gzip-compressed JSON Lines files per day.
//
// # Who prunes what
//
// Every scheduler node runs a Janitor over the shards it holds, as it
// fires them: no other lease, no cluster-wide lock. Each batch is one
// transaction that first fences the node's shard leases (the firing
// transaction's check: a node that lost a shard prunes nothing of it),
// then takes up to Batch expired runs with FOR UPDATE SKIP LOCKED (a run
// that a replay or a late report holds is left for a later pass, and
// nothing waits on the janitor), and deletes attempts, edges, tasks and
// runs. Batches are small and each commits on its own, so no lock is held
// long and firing goes on beside it.
//
// Runs holding a dead letter are never pruned (they wait for a replay);
// the audit trail is not this package's business. Finished notifications
// and resolved alerts older than the default retention go too, in batches
// of their own.
//
// # Archive
//
// With Config.ArchiveDir, the batch's runs are appended, before the
// delete commits, to ArchiveDir/TENANT/runs-YYYY-MM-DD.jsonl.gz (the UTC
// day the run finished; one gzip member per batch, which gzip readers
// read as one stream), one JSON object per run with its tasks and their
// attempts, and the file is synced. If the transaction then fails, or the
// process dies before it commits, the next pass archives those runs
// again: the archive is at least once, and readers dedupe by run id.
//
// Pruning a run also frees its (job, instant): the scheduler never fires
// an instant older than its misfire window and backfill bound, far less
// than any sensible retention.
package retention

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/shard"
)

// Config configures a Janitor.
type Config struct {
	Pool   *pgxpool.Pool
	Shards *shard.Manager
	// Retention is how long finished runs are kept; default 7 days.
	Retention time.Duration
	// ArchiveDir, when set, receives the runs before they are deleted.
	ArchiveDir string
	// Batch is how many runs one transaction prunes; default 200.
	Batch int
	// Interval between passes; default 1 minute.
	Interval time.Duration
	Logger   *slog.Logger
}

// DefaultRetention is Config.Retention when unset; MinRetention is the
// least it (or a tenant's override) may be: the schedule ledger shows
// the last 3 days, and a pruned instant would read as missed.
const (
	DefaultRetention = 7 * 24 * time.Hour
	MinRetention     = 72 * time.Hour
)

func (c *Config) withDefaults() error {
	switch {
	case c.Pool == nil:
		return errors.New("retention: Config.Pool is required")
	case c.Shards == nil:
		return errors.New("retention: Config.Shards is required")
	case c.Retention < 0 || c.Batch < 0 || c.Interval < 0:
		return errors.New("retention: Retention, Batch and Interval must not be negative")
	case c.Retention > 0 && c.Retention < MinRetention:
		return fmt.Errorf("retention: Retention %s: at least %s (the web UI's schedule ledger shows 3 days)", c.Retention, MinRetention)
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Batch == 0 {
		c.Batch = 200
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ArchiveDir != "" {
		if err := os.MkdirAll(c.ArchiveDir, 0o750); err != nil {
			return fmt.Errorf("retention: archive dir: %w", err)
		}
	}
	return nil
}

// Janitor prunes the runs of this node's shards.
type Janitor struct {
	cfg Config
}

// New returns a Janitor.
func New(cfg Config) (*Janitor, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return &Janitor{cfg: cfg}, nil
}

// Run prunes every Interval until ctx ends (every 2 s while the node's
// shards change, as when it starts or takes shards over, so that it
// prunes what it just got soon).
func (j *Janitor) Run(ctx context.Context) error {
	held := -1
	for {
		before := len(j.cfg.Shards.Leases())
		if n, err := j.Pass(ctx); err != nil && ctx.Err() == nil {
			j.cfg.Logger.Error("retention pass failed", "err", err, "pruned", n)
		} else if n > 0 {
			j.cfg.Logger.Info("old runs pruned", "count", n, "archived", j.cfg.ArchiveDir != "")
		}
		wait := j.cfg.Interval
		if before == 0 || before != held {
			wait = min(wait, 2*time.Second)
		}
		held = before
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Pass prunes, batch by batch, until the node's shards hold no expired
// run; it returns how many runs it pruned.
func (j *Janitor) Pass(ctx context.Context) (int, error) {
	// The smallest retention of any tenant bounds the index scan; read once
	// a pass (a change applies from the next one).
	minRet, err := store.New(j.cfg.Pool).MinRunRetention(ctx)
	if err != nil {
		return 0, err
	}
	def, floor := int64(j.cfg.Retention.Seconds()), int64(MinRetention.Seconds())
	if minRet == 0 || minRet > def {
		minRet = def
	}
	p := store.ExpiredRunsParams{MinSeconds: float64(max(minRet, floor)), DefaultSeconds: def, FloorSeconds: floor, Batch: int32(j.cfg.Batch)}
	total := 0
	for {
		n, err := j.pruneBatch(ctx, p)
		total += n
		if err != nil {
			return total, err
		}
		if n < j.cfg.Batch {
			break
		}
	}
	if err := j.pruneEvents(ctx, p); err != nil {
		return total, err
	}
	return total, j.pruneNotices(ctx, float64(def))
}

// pruneEvents deletes, in batches, the events received longer ago than
// their tenant keeps runs (p's retentions): as long as the runs they
// started or ended, whose archive holds them. They have no shard: every
// node may prune them, and two that meet delete each row once.
func (j *Janitor) pruneEvents(ctx context.Context, p store.ExpiredRunsParams) error {
	for {
		n, err := store.New(j.cfg.Pool).PruneEvents(ctx, store.PruneEventsParams{MinSeconds: p.MinSeconds, DefaultSeconds: p.DefaultSeconds,
			FloorSeconds: p.FloorSeconds, Batch: p.Batch})
		if err != nil || n < int64(p.Batch) {
			return err
		}
	}
}

// pruneNotices deletes, in batches, finished notifications, resolved
// alerts and finished backfills older than the default retention. They
// have no shard (a backfill has its job's, but no run hangs on it): every
// node may prune them, and two that meet delete each row once.
func (j *Janitor) pruneNotices(ctx context.Context, olderThan float64) error {
	q := store.New(j.cfg.Pool)
	for _, prune := range []func() (int64, error){
		func() (int64, error) {
			return q.PruneNotifications(ctx, store.PruneNotificationsParams{OlderThanSeconds: olderThan, Batch: int32(j.cfg.Batch)})
		},
		func() (int64, error) {
			return q.PruneResolvedAlerts(ctx, store.PruneResolvedAlertsParams{OlderThanSeconds: olderThan, Batch: int32(j.cfg.Batch)})
		},
		func() (int64, error) {
			return q.PruneFinishedBackfills(ctx, store.PruneFinishedBackfillsParams{OlderThanSeconds: olderThan, Batch: int32(j.cfg.Batch)})
		},
	} {
		for {
			n, err := prune()
			if err != nil {
				return err
			}
			if n < int64(j.cfg.Batch) {
				break
			}
		}
	}
	return nil
}

// archived is one run as the archive holds it.
type archived struct {
	Run      archivedRun    `json:"run"`
	Tasks    []archivedTask `json:"tasks"`
	Archived time.Time      `json:"archived_at"`
}

// archivedRun is a run with its params, its event (run.event: what
// started it), its upstream and who triggered it, as JSON.
type archivedRun struct {
	store.ExpiredRunsRow
	Params   json.RawMessage `json:"Params,omitempty"`
	Event    json.RawMessage `json:"Event,omitempty"`
	Upstream json.RawMessage `json:"Upstream,omitempty"`
}

type archivedTask struct {
	store.Task
	Attempts []store.Attempt `json:"attempts"`
}

// pruneBatch archives and deletes one batch of expired runs, fenced by
// this node's shard leases.
func (j *Janitor) pruneBatch(ctx context.Context, p store.ExpiredRunsParams) (int, error) {
	leases := j.cfg.Shards.Leases()
	if len(leases) == 0 {
		return 0, nil
	}
	var n int
	err := store.InRawTx(ctx, j.cfg.Pool, func(tx pgx.Tx) error {
		n = 0
		q := store.New(tx)
		held, err := j.cfg.Shards.Fence(ctx, tx, leases)
		if errors.Is(err, shard.ErrLost) {
			return nil // the node holds none of them any more
		}
		if err != nil {
			return err
		}
		p.Shards = shard.Shards(held)
		runs, err := q.ExpiredRuns(ctx, p)
		if err != nil || len(runs) == 0 {
			return err
		}
		runIDs := make([]uuid.UUID, len(runs))
		for i, r := range runs {
			runIDs[i] = r.ID
		}
		tasks, err := q.TasksOfRuns(ctx, runIDs)
		if err != nil {
			return err
		}
		taskIDs := make([]uuid.UUID, len(tasks))
		for i, t := range tasks {
			taskIDs[i] = t.ID
		}
		if j.cfg.ArchiveDir != "" {
			attempts, err := q.AttemptsOfTasks(ctx, taskIDs)
			if err != nil {
				return err
			}
			now, err := q.DatabaseNow(ctx)
			if err != nil {
				return err
			}
			if err := j.archive(runs, tasks, attempts, now); err != nil {
				return err
			}
		}
		for _, del := range []func() error{
			func() error { return q.DeleteAttemptsOfTasks(ctx, taskIDs) },
			func() error { return q.DeleteEdgesOfTasks(ctx, taskIDs) },
			func() error { return q.DeleteTasksOfRuns(ctx, runIDs) },
			func() error { return q.DeleteUpstreamFinishesOfRuns(ctx, runIDs) }, // (left only when downstream steps stalled for the whole retention)
			func() error { return q.DeleteRuns(ctx, runIDs) },
			func() error { return q.DeleteRunTrees(ctx, runIDs) },
			func() error { return q.AddRunUsage(ctx, released(runs, tasks)) },
		} {
			if err := del(); err != nil {
				return err
			}
		}
		n = len(runs)
		return nil
	})
	return n, err
}

// released is what the batch takes from its tenants' storage (package
// usage): its runs and tasks per (tenant, shard), negative, in key order.
func released(runs []store.ExpiredRunsRow, tasks []store.Task) store.AddRunUsageParams {
	type key struct {
		tenant uuid.UUID
		shard  int32
	}
	of := make(map[uuid.UUID]key, len(runs))
	n := map[key][2]int64{}
	for _, r := range runs {
		k := key{r.TenantID, r.Shard}
		of[r.ID] = k
		c := n[k]
		c[0]--
		n[k] = c
	}
	for _, t := range tasks {
		k := of[t.RunID]
		c := n[k]
		c[1]--
		n[k] = c
	}
	keys := slices.SortedFunc(maps.Keys(n), func(a, b key) int {
		if c := bytes.Compare(a.tenant[:], b.tenant[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.shard, b.shard)
	})
	var p store.AddRunUsageParams
	for _, k := range keys {
		p.TenantIds = append(p.TenantIds, k.tenant)
		p.Shards = append(p.Shards, k.shard)
		p.Runs = append(p.Runs, n[k][0])
		p.Tasks = append(p.Tasks, n[k][1])
	}
	return p
}

// archive appends the runs, one gzip member per file, to their tenant's
// day files, and syncs them.
func (j *Janitor) archive(runs []store.ExpiredRunsRow, tasks []store.Task, attempts []store.Attempt, now time.Time) error {
	byTask := map[uuid.UUID][]store.Attempt{}
	for _, a := range attempts {
		byTask[a.TaskID] = append(byTask[a.TaskID], a)
	}
	byRun := map[uuid.UUID][]archivedTask{}
	for _, t := range tasks {
		byRun[t.RunID] = append(byRun[t.RunID], archivedTask{Task: t, Attempts: byTask[t.ID]})
	}
	files := map[string][]archived{}
	for _, r := range runs {
		name := filepath.Join(j.cfg.ArchiveDir, r.TenantID.String(), "runs-"+r.FinishedAt.UTC().Format("2006-01-02")+".jsonl.gz")
		ar := archivedRun{ExpiredRunsRow: r, Params: r.Params, Event: r.Event, Upstream: r.Upstream}
		files[name] = append(files[name], archived{Run: ar, Tasks: byRun[r.ID], Archived: now})
	}
	for name, rs := range files {
		if err := appendMember(name, rs); err != nil {
			return fmt.Errorf("retention: archive %s: %w", name, err)
		}
	}
	return nil
}

// appendMember appends one gzip member holding rs to the file and syncs
// it (and its folder when the file is new). On any error the file is cut
// back to its size before, so a failed batch never leaves a broken member
// that would hide the ones after it.
func appendMember(name string, rs []archived) (err error) {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Truncate(size)
		}
	}()
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if size == 0 { // a new file: make its name durable too
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	}
	return nil
}
