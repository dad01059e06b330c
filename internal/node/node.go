// Package node assembles one scheduler node: its shard leases, the
// scheduler that fires the shards it owns, the reaper of lapsed task and
// worker leases, the janitor and the watchdog of its shards, the admitter
// of the queues it releases tasks into, and (when
// River lives in its own database) the outbox relay. The API and worker
// pools run beside it in the same process or elsewhere.
package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/reaper"
	"github.com/orrery-dev/orrery/internal/retention"
	"github.com/orrery-dev/orrery/internal/scheduler"
	"github.com/orrery-dev/orrery/internal/watchdog"
	"github.com/orrery-dev/orrery/shard"
)

// Config configures a node.
type Config struct {
	Pool       *pgxpool.Pool
	Dispatcher *dispatch.Dispatcher
	Name       string
	// ShardTTL is the shard lease TTL (default 10 s): a dead node's shards
	// move after it.
	ShardTTL time.Duration
	// MisfireAfter: see scheduler.Config.
	MisfireAfter time.Duration
	// FireBatch and FireParallel: scheduler.Config's Batch and Parallel.
	FireBatch, FireParallel int
	Logger                  *slog.Logger
	// Failpoints arms the scheduler's test seams; nil in production.
	Failpoints *failpoint.Set
	// Metrics records the node's shards, firing and reaping; nil: none.
	Metrics *metrics.Metrics
	// Retention and ArchiveDir configure the janitor that prunes old runs
	// of the node's shards (see package retention); zero: 7 days, no
	// archive.
	Retention  time.Duration
	ArchiveDir string
	// WatchdogInterval is the time between the watchdog's passes over the
	// node's shards (see package watchdog); default 2 s.
	WatchdogInterval time.Duration
}

func (c *Config) withDefaults() error {
	switch {
	case c.Pool == nil:
		return errors.New("node: Config.Pool is required")
	case c.Dispatcher == nil:
		return errors.New("node: Config.Dispatcher is required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Node is a running scheduler node.
type Node struct {
	Shards    *shard.Manager
	Scheduler *scheduler.Scheduler
	reaper    *reaper.Reaper
	janitor   *retention.Janitor
	Watchdog  *watchdog.Watchdog
	relay     func(context.Context) error
	admit     func(context.Context) error
}

// New builds a node; Run runs it.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	mgr, err := shard.NewManager(ctx, cfg.Pool, shard.Config{NodeName: cfg.Name, TTL: cfg.ShardTTL, Logger: cfg.Logger, Metrics: cfg.Metrics})
	if err != nil {
		return nil, err
	}
	s, err := scheduler.New(scheduler.Config{Pool: cfg.Pool, Shards: mgr, Dispatcher: cfg.Dispatcher, MisfireAfter: cfg.MisfireAfter,
		Batch: cfg.FireBatch, Parallel: cfg.FireParallel, Logger: cfg.Logger, Failpoints: cfg.Failpoints, Metrics: cfg.Metrics})
	if err != nil {
		return nil, err
	}
	rp, err := reaper.New(reaper.Config{Pool: cfg.Pool, Dispatcher: cfg.Dispatcher, Logger: cfg.Logger, Metrics: cfg.Metrics})
	if err != nil {
		return nil, err
	}
	janitor, err := retention.New(retention.Config{Pool: cfg.Pool, Shards: mgr, Retention: cfg.Retention, ArchiveDir: cfg.ArchiveDir, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	dog, err := watchdog.New(watchdog.Config{Pool: cfg.Pool, Shards: mgr, Interval: cfg.WatchdogInterval, Logger: cfg.Logger, Metrics: cfg.Metrics})
	if err != nil {
		return nil, err
	}
	relay := func(ctx context.Context) error {
		return cfg.Dispatcher.Relay(ctx, cfg.Pool, 20*time.Millisecond, cfg.Logger)
	}
	// The admitter of the queues this node releases tasks into (its runs'
	// first steps, the reaper's retries): woken by its releases only; the
	// workers of each queue poll theirs.
	admit := func(ctx context.Context) error {
		return cfg.Dispatcher.Admit(ctx, dispatch.AdmitConfig{Pool: cfg.Pool, Logger: cfg.Logger,
			Failpoints: cfg.Failpoints})
	}
	return &Node{Shards: mgr, Scheduler: s, reaper: rp, janitor: janitor, Watchdog: dog, relay: relay, admit: admit}, nil
}

// Run runs the node until ctx ends; on the way out its shards are released
// so that other nodes take them at once.
func (n *Node) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	parts := []func(context.Context) error{n.Shards.Run, n.Scheduler.Run, n.reaper.Run, n.janitor.Run, n.Watchdog.Run, n.relay, n.admit}
	errs := make(chan error, len(parts))
	for _, run := range parts {
		wg.Go(func() { errs <- run(ctx) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
