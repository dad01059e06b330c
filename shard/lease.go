package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/cockroach-go/v2/crdb"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/shard/internal/db"
)

// ErrLost is returned by work done for a shard this node no longer owns at
// the epoch it claimed (another node took it over, or it was released);
// Fence's *LostError matches it (errors.Is).
var ErrLost = errors.New("shard: ownership lost")

// Config configures a node's shard ownership.
type Config struct {
	// NodeID identifies this node; default a new UUID.
	NodeID uuid.UUID
	// NodeName is shown in the cluster view; default host-pid.
	NodeName string
	// TTL is how long a node's and its shards' leases last without renewal;
	// a dead node's shards move once it lapses. Default 10 s.
	TTL time.Duration
	// Interval between heartbeats (renewal, rebalancing); default TTL/4.
	Interval time.Duration
	Logger   *slog.Logger
	// Metrics records the shards owned and claimed (a *metrics.Metrics);
	// nil: none.
	Metrics Recorder
}

// Recorder is what the Manager reports to metrics.
type Recorder interface {
	ShardsOwned(node string, n int)
	ShardTakeovers(n int)
}

func (c *Config) withDefaults() error {
	if c.NodeID == uuid.Nil {
		c.NodeID = uuid.Must(uuid.NewV7())
	}
	if c.NodeName == "" {
		host, _ := os.Hostname()
		c.NodeName = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.TTL == 0 {
		c.TTL = 10 * time.Second
	}
	if c.Interval == 0 {
		c.Interval = c.TTL / 4
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.TTL < time.Second:
		return errors.New("shard: Config.TTL must be at least 1s")
	case c.Interval <= 0 || c.Interval >= c.TTL/2:
		return errors.New("shard: Config.Interval must be positive and under half of TTL")
	}
	return nil
}

// Lease is this node's ownership of one shard at one epoch. Done is closed
// when the node stops owning it; work for the shard must stop then, and
// every write for the shard checks the epoch in its own transaction.
type Lease struct {
	Shard int
	Epoch int64
	done  chan struct{}
}

// pairs are the leases' shards and epochs, as the Fence and RenewShards
// queries match them.
func pairs(leases []*Lease) (ids []int32, epochs []int64) {
	ids, epochs = make([]int32, len(leases)), make([]int64, len(leases))
	for i, l := range leases {
		ids[i], epochs[i] = int32(l.Shard), l.Epoch
	}
	return ids, epochs
}

// Done is closed when the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Manager keeps this node registered and owning an even share of the
// shards: it heartbeats, renews its leases, claims shards nobody holds and
// releases shards above its share when nodes join. All times come from the
// database; this process's clock only paces the heartbeats.
type Manager struct {
	cfg    Config
	q      *db.Queries
	count  int
	mu     sync.Mutex
	owned  map[int]*Lease
	lastOK time.Time     // last successful heartbeat, monotonic clock
	change chan struct{} // signalled when the owned set changes
}

// NewManager prepares a Manager (creating the shard rows on first use);
// Run starts it.
func NewManager(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Manager, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	q := db.New(pool)
	n, err := q.ShardCount(ctx)
	if err != nil {
		return nil, fmt.Errorf("shard: read shard count: %w", err)
	}
	if err := retry(ctx, func(ctx context.Context) error { return q.EnsureShards(ctx, n-1) }); err != nil {
		return nil, fmt.Errorf("shard: create shard rows: %w", err)
	}
	return &Manager{cfg: cfg, q: q, count: int(n), owned: map[int]*Lease{}, change: make(chan struct{}, 1)}, nil
}

// NodeID is this node's id.
func (m *Manager) NodeID() uuid.UUID { return m.cfg.NodeID }

// NodeName is this node's name.
func (m *Manager) NodeName() string { return m.cfg.NodeName }

// Leases returns the shards this node owns now, by shard number.
func (m *Manager) Leases() []*Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Lease, 0, len(m.owned))
	for _, l := range m.owned {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out
}

// Changed is signalled (without blocking) whenever the owned set changes.
func (m *Manager) Changed() <-chan struct{} { return m.change }

// Lost drops a lease whose fencing check failed in a write transaction.
func (m *Manager) Lost(l *Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owned[l.Shard] == l {
		m.dropLocked(l, "fencing check failed")
	}
}

func (m *Manager) dropLocked(l *Lease, why string) {
	delete(m.owned, l.Shard)
	close(l.done)
	m.cfg.Logger.Warn("shard lost", "shard", l.Shard, "epoch", l.Epoch, "reason", why)
	m.signal()
}

// signal tells the scheduler the owned set changed (m.mu held).
func (m *Manager) signal() {
	m.record()
	select {
	case m.change <- struct{}{}:
	default:
	}
}

// Run heartbeats until ctx ends, then releases every shard and the node's
// lease so that other nodes take over at once.
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	m.mu.Lock()
	m.lastOK = time.Now()
	m.mu.Unlock()
	for {
		if err := m.tick(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Error("shard heartbeat failed", "err", err)
			m.dropAllIfStale()
		}
		select {
		case <-ctx.Done():
			m.shutdown()
			return nil
		case <-t.C:
		}
	}
}

// dropAllIfStale stops all shard work when heartbeats have failed for half
// the TTL (on this process's monotonic clock, so wall-clock jumps do not
// matter): the leases may lapse before we can tell.
func (m *Manager) dropAllIfStale() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Since(m.lastOK) < m.cfg.TTL/2 {
		return
	}
	for _, l := range m.owned {
		m.dropLocked(l, "heartbeats failing")
	}
}

func (m *Manager) tick(ctx context.Context) error {
	ttl := m.cfg.TTL.Seconds()
	node := m.cfg.NodeID
	err := retry(ctx, func(ctx context.Context) error {
		_, err := m.q.Heartbeat(ctx, db.HeartbeatParams{ID: node, Name: m.cfg.NodeName, TtlSeconds: ttl})
		return err
	})
	if err != nil {
		return err
	}
	// Renew what we hold; whatever is not renewed is lost.
	if held := m.Leases(); len(held) > 0 {
		ids, epochs := pairs(held)
		var rows []db.RenewShardsRow
		err := retry(ctx, func(ctx context.Context) error {
			var err error
			rows, err = m.q.RenewShards(ctx, db.RenewShardsParams{Node: &node, TtlSeconds: ttl, Ids: ids, Epochs: epochs})
			return err
		})
		if err != nil {
			return err
		}
		renewed := make(map[int]bool, len(rows))
		for _, r := range rows {
			renewed[int(r.ID)] = true
		}
		m.mu.Lock()
		for _, l := range held {
			if !renewed[l.Shard] && m.owned[l.Shard] == l {
				m.dropLocked(l, "lease not renewed (taken over or lapsed)")
			}
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	m.lastOK = time.Now()
	m.mu.Unlock()
	return m.rebalance(ctx)
}

// rebalance moves this node toward its share: shard count / live nodes,
// the first (count mod live) nodes in id order taking one more.
func (m *Manager) rebalance(ctx context.Context) error {
	live, err := m.q.LiveNodes(ctx)
	if err != nil {
		return err
	}
	index := -1
	for i, id := range live {
		if id == m.cfg.NodeID {
			index = i
		}
	}
	if index < 0 {
		return nil // our own heartbeat is not visible yet
	}
	target := m.count / len(live)
	if index < m.count%len(live) {
		target++
	}
	node := m.cfg.NodeID
	held := m.Leases()
	switch {
	case len(held) > target:
		// Give back the highest-numbered shards, stopping their work first.
		excess := held[target:]
		ids := make([]int32, len(excess))
		m.mu.Lock()
		for i, l := range excess {
			ids[i] = int32(l.Shard)
			if m.owned[l.Shard] == l {
				delete(m.owned, l.Shard)
				close(l.done)
			}
		}
		m.signal()
		m.mu.Unlock()
		if err := retry(ctx, func(ctx context.Context) error {
			return m.q.ReleaseShards(ctx, db.ReleaseShardsParams{Node: &node, Ids: ids})
		}); err != nil {
			return err
		}
		m.cfg.Logger.Info("shards released to rebalance", "count", len(ids), "target", target, "live_nodes", len(live))
	case len(held) < target:
		var rows []db.ClaimShardsRow
		err := retry(ctx, func(ctx context.Context) error {
			var err error
			rows, err = m.q.ClaimShards(ctx, db.ClaimShardsParams{Node: &node, TtlSeconds: m.cfg.TTL.Seconds(), Max: int32(target - len(held))})
			return err
		})
		if err != nil || len(rows) == 0 {
			return err
		}
		m.mu.Lock()
		for _, r := range rows {
			m.owned[int(r.ID)] = &Lease{Shard: int(r.ID), Epoch: r.Epoch, done: make(chan struct{})}
		}
		m.signal()
		m.mu.Unlock()
		if m.cfg.Metrics != nil {
			m.cfg.Metrics.ShardTakeovers(len(rows))
		}
		m.cfg.Logger.Info("shards claimed", "count", len(rows), "target", target, "live_nodes", len(live))
	}
	return nil
}

func (m *Manager) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held := m.Leases()
	ids := make([]int32, len(held))
	m.mu.Lock()
	for i, l := range held {
		ids[i] = int32(l.Shard)
		delete(m.owned, l.Shard)
		close(l.done)
	}
	m.record()
	m.mu.Unlock()
	node := m.cfg.NodeID
	if len(ids) > 0 {
		if err := retry(ctx, func(ctx context.Context) error {
			return m.q.ReleaseShards(ctx, db.ReleaseShardsParams{Node: &node, Ids: ids})
		}); err != nil {
			m.cfg.Logger.Warn("release shards on shutdown", "err", err)
		}
	}
	if err := retry(ctx, func(ctx context.Context) error { return m.q.ForgetNode(ctx, node) }); err != nil {
		m.cfg.Logger.Warn("leave the cluster", "err", err)
	}
}

// retry runs one statement again on serialization failures (SQLSTATE
// 40001), which serializable PostgreSQL and CockroachDB raise when nodes
// touch the same rows at once.
func retry(ctx context.Context, fn func(context.Context) error) error {
	return crdb.ExecuteCtx(ctx, func(ctx context.Context, _ ...any) error { return fn(ctx) })
}

// record reports the shards held (m.mu held).
func (m *Manager) record() {
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.ShardsOwned(m.cfg.NodeName, len(m.owned))
	}
}
