// Package gateway hands remote steps to remote workers
// (docs/remote-workers.md): every API node runs one, serving
// WorkerService's claims, heartbeats and reports over its River client of
// the hand-off queue.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/orrery-dev/orrery/internal/batch"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/riverproc"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// Config configures a Gateway.
type Config struct {
	StatePool *pgxpool.Pool
	// QueueDBs: as a worker's (engine/worker.Config). The hand-off
	// queue is in Default's.
	QueueDBs dispatch.QueueDBs
	// Name identifies the gateway's River client in workers; default
	// gateway-host-pid.
	Name string
	// LeaseTTL is the gateway's own lease: what it fetched and had not
	// offered is delivered again once it lapses. Default 15 s.
	LeaseTTL time.Duration
	// Concurrency bounds the hand-off jobs it offers at once; default 100.
	Concurrency int
	// PollInterval is how often a waiting claim looks for offers another
	// node made (this node's own wake it at once); default 100 ms.
	PollInterval      time.Duration
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	Logger            *slog.Logger
	// Failpoints arms FailpointHandedOff and FailpointClaimed.
	Failpoints *failpoint.Set
	Metrics    *metrics.Metrics
}

// The gateway's failpoints.
const (
	// FailpointHandedOff is hit when the gateway's River client has
	// fetched a remote task's job, before its offer.
	FailpointHandedOff = "gateway/handed-off"
	// FailpointClaimed is hit when a claim that took attempts has
	// committed, before its answer is sent.
	FailpointClaimed = "gateway/claimed"
)

func (c *Config) withDefaults() error {
	if c.StatePool == nil {
		return errors.New("gateway: Config.StatePool is required")
	}
	if c.QueueDBs.Default == nil {
		c.QueueDBs.Default = c.StatePool
	}
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = fmt.Sprintf("gateway-%s-%d", host, os.Getpid())
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 15 * time.Second
	}
	if c.LeaseTTL < time.Second {
		return errors.New("gateway: Config.LeaseTTL must be at least 1s")
	}
	if c.Concurrency == 0 {
		c.Concurrency = 100
	}
	if c.Concurrency < 0 || c.Concurrency > river.QueueNumWorkersMax {
		return fmt.Errorf("gateway: Config.Concurrency %d: want 1 to %d", c.Concurrency, river.QueueNumWorkersMax)
	}
	if c.PollInterval == 0 {
		c.PollInterval = 100 * time.Millisecond
	}
	if c.FetchCooldown == 0 {
		c.FetchCooldown = 10 * time.Millisecond
	}
	if c.FetchPollInterval == 0 {
		c.FetchPollInterval = 100 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// A Gateway hands remote steps to remote workers (docs/remote-workers.md):
// its River client serves the hand-off queue, turning each job into an
// offer, and it serves WorkerService's claims, heartbeats and reports.
// Every API node runs one; a remote worker may call any of them. It
// holds a lease in workers, as a worker process does, so that what it
// fetched and had not offered is redelivered if it dies.
type Gateway struct {
	cfg        Config
	id         uuid.UUID
	river      *river.Client[pgx.Tx]
	riverPool  *pgxpool.Pool
	dispatcher *dispatch.Dispatcher
	offers     *batch.Batcher[run.Start, bool]
	reports    *batch.Batcher[run.Report, bool]

	mu      sync.Mutex
	offered chan struct{} // closed, and replaced, when offers commit
	// stopping is closed when Run's context ends: waiting claims return.
	stopping chan struct{}
}

// New prepares a gateway; Run starts it.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	d, err := dispatch.ForQueues(cfg.StatePool, cfg.QueueDBs)
	if err != nil {
		return nil, err
	}
	d.ObserveAdmissions(cfg.Metrics.AdmissionWait)
	g := &Gateway{cfg: cfg, id: uuid.Must(uuid.NewV7()), dispatcher: d, offered: make(chan struct{}), stopping: make(chan struct{})}
	g.offers = batch.New("offer remote attempts", cfg.Logger, g.offer)
	g.reports = batch.New("report remote attempts", cfg.Logger, g.finish)
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &handoffWorker{g: g}); err != nil {
		return nil, err
	}
	if g.riverPool, err = riverproc.ReadCommitted(cfg.QueueDBs.Default); err != nil {
		return nil, fmt.Errorf("gateway: river: %w", err)
	}
	g.river, err = river.NewClient(riverpgxv5.New(g.riverPool), &river.Config{
		ID:                g.id.String(), // how the reaper finds what a dead gateway fetched
		Queues:            map[string]river.QueueConfig{dispatch.HandoffQueue: {MaxWorkers: cfg.Concurrency}},
		Workers:           workers,
		FetchCooldown:     cfg.FetchCooldown,
		FetchPollInterval: cfg.FetchPollInterval,
		JobTimeout:        -1,
		Logger:            riverproc.RiverLogger(cfg.Logger),
	})
	if err != nil {
		g.riverPool.Close()
		return nil, fmt.Errorf("gateway: river: %w", err)
	}
	return g, nil
}

// Run serves the hand-off queue until ctx ends.
func (g *Gateway) Run(ctx context.Context) error {
	defer g.riverPool.Close()
	// Stopped before it started serving (ctx ended while it registered or
	// started River): a clean stop, not an error.
	if err := g.beat(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("gateway: register: %w", err)
	}
	if err := riverproc.StartRiver(ctx, g.river); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("gateway: start river: %w", err)
	}
	var background sync.WaitGroup
	bgCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	background.Go(func() {
		t := time.NewTicker(g.cfg.LeaseTTL / riverproc.BeatsPerTTL)
		defer t.Stop()
		for {
			select {
			case <-bgCtx.Done():
				return
			case <-t.C:
			}
			beatCtx, cancel := context.WithTimeout(bgCtx, g.cfg.LeaseTTL/riverproc.BeatsPerTTL)
			if err := g.beat(beatCtx); err != nil && bgCtx.Err() == nil {
				g.cfg.Logger.Error("renew gateway lease", "err", err)
			}
			if _, err := store.New(g.cfg.StatePool).DeleteStaleOffers(beatCtx, 1000); err != nil && bgCtx.Err() == nil {
				g.cfg.Logger.Warn("delete stale offers", "err", err)
			}
			cancel()
		}
	})
	// Remote queues are admitted here once a claim names them (Kick), as
	// any process admits the queues its releases wake.
	background.Go(func() {
		_ = g.dispatcher.Admit(bgCtx, dispatch.AdmitConfig{Pool: g.cfg.StatePool, Logger: g.cfg.Logger, Failpoints: g.cfg.Failpoints})
	})
	g.cfg.Logger.Info("gateway for remote workers started", "name", g.cfg.Name)
	<-ctx.Done()
	close(g.stopping)
	stopCtx, cancel := context.WithTimeout(context.Background(), g.cfg.LeaseTTL)
	defer cancel()
	err := g.river.Stop(stopCtx)
	if err != nil {
		err = g.river.StopAndCancel(context.Background())
	}
	stop()
	background.Wait()
	g.offers.Wait()
	g.reports.Wait()
	if err == nil {
		leaveCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if lerr := store.New(g.cfg.StatePool).LeaveWorker(leaveCtx, g.id); lerr != nil {
			g.cfg.Logger.Warn("gateway: end lease", "err", lerr)
		}
	}
	return err
}

// beat renews the gateway's lease (registering it the first time).
func (g *Gateway) beat(ctx context.Context) error {
	return riverproc.RenewLease(ctx, g.cfg.StatePool, g.id, g.cfg.Name, map[string]int{dispatch.HandoffQueue: g.cfg.Concurrency}, nil, nil, "", g.cfg.LeaseTTL)
}

// handoffWorker is the River worker of the hand-off queue.
type handoffWorker struct {
	river.WorkerDefaults[dispatch.TaskArgs]
	g *Gateway
}

func (h *handoffWorker) Work(ctx context.Context, job *river.Job[dispatch.TaskArgs]) error {
	h.g.cfg.Failpoints.Hit(FailpointHandedOff)
	_, err := h.g.offers.Do(ctx, run.Start{TaskID: job.Args.TaskID, Attempt: job.Args.Attempt})
	return err // River tries again; an offer made twice is one offer
}

// offer writes a batch of offers and wakes the claims waiting here.
func (g *Gateway) offer(ctx context.Context, starts []run.Start) ([]bool, error) {
	err := store.InRawTx(ctx, g.cfg.StatePool, func(tx pgx.Tx) error {
		return run.OfferRemote(ctx, tx, starts)
	})
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	close(g.offered)
	g.offered = make(chan struct{})
	g.mu.Unlock()
	return make([]bool, len(starts)), nil
}

// offers returns a channel closed at the next commit of offers here.
func (g *Gateway) nextOffers() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.offered
}

// Claim waits up to wait for attempts w may run, and starts up to max of
// them on w, each under a lease of lease (never past its step's timeout).
// It registers w first, so that its slots count for admission, and again
// while it waits. An attempt whose expressions failed is reported at once
// and not handed out. None when the wait ends, or ctx does, or the
// gateway stops (so that a long poll never holds up a shutdown).
func (g *Gateway) Claim(ctx context.Context, w run.RemoteWorker, max int, wait, lease time.Duration) ([]*run.Attempt, error) {
	register := func() error {
		if err := store.Retry(ctx, func() error { return w.Register(ctx, g.cfg.StatePool, lease) }); err != nil {
			return err
		}
		for _, q := range w.RemoteQueues() {
			g.dispatcher.Kick(q)
		}
		return nil
	}
	if err := register(); err != nil {
		return nil, err
	}
	// Timers pace the wait; no decision reads this node's clock.
	done := time.NewTimer(wait)
	defer done.Stop()
	renew := time.NewTicker(lease / riverproc.BeatsPerTTL)
	defer renew.Stop()
	for {
		next := g.nextOffers()
		out, err := g.claimOnce(ctx, w, max, lease)
		if err != nil || len(out) > 0 {
			return out, err
		}
		poll := time.NewTimer(g.cfg.PollInterval)
		select {
		case <-ctx.Done():
			poll.Stop()
			return nil, nil
		case <-g.stopping:
			poll.Stop()
			return nil, nil
		case <-done.C:
			poll.Stop()
			return nil, nil
		case <-renew.C:
			if err := register(); err != nil {
				poll.Stop()
				return nil, err
			}
		case <-next:
		case <-poll.C:
		}
		poll.Stop()
	}
}

// claimOnce takes what offers w may have now (run.ClaimRemote), in a
// transaction of its own, and reports at once those whose expressions
// failed: they are not handed out.
func (g *Gateway) claimOnce(ctx context.Context, w run.RemoteWorker, max int, lease time.Duration) ([]*run.Attempt, error) {
	var claimed []*run.Attempt
	err := store.InRawTx(ctx, g.cfg.StatePool, func(tx pgx.Tx) error {
		var err error
		claimed, err = run.ClaimRemote(ctx, tx, w, max, lease)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(claimed) > 0 {
		g.cfg.Failpoints.Hit(FailpointClaimed)
	}
	return slices.DeleteFunc(claimed, func(a *run.Attempt) bool {
		if a.Refused == nil {
			return false
		}
		r := run.Report{TaskID: a.Call.TaskID, RunID: a.Call.RunID, FencingToken: a.Call.FencingToken, Result: *a.Refused, Shape: &a.Shape}
		if _, err := g.reports.Do(context.WithoutCancel(ctx), r); err != nil {
			// Its lease lapses: the reaper retries it, and it is refused again.
			g.cfg.Logger.Error("report a remote attempt refused by its expressions", "task_id", r.TaskID, "err", err)
		}
		return true
	}), nil
}

// Heartbeat renews w's lease and those of the attempts it holds, and
// returns the attempts to stop, with why (run.RenewRemote).
func (g *Gateway) Heartbeat(ctx context.Context, w run.RemoteWorker, held []run.Held, lease time.Duration) (map[uuid.UUID]string, error) {
	var stop map[uuid.UUID]string
	err := store.InRawTx(ctx, g.cfg.StatePool, func(tx pgx.Tx) error {
		var err error
		stop, err = run.RenewRemote(ctx, tx, w, held, lease)
		return err
	})
	return stop, err
}

// Report ends attempts w runs, all in one transaction (a single report
// joins other workers' in the gateway's batcher): per report, false when
// its token is stale (the report is recorded on the attempt as late). A
// run.NotHeldError (run.ErrNotHeld) when one did not start on w: then
// nothing is written.
func (g *Gateway) Report(ctx context.Context, w run.RemoteWorker, reports []run.Report) ([]bool, error) {
	reports, queues, err := run.RemoteReports(ctx, g.cfg.StatePool, w, reports)
	if err != nil {
		return nil, err
	}
	var accepted []bool
	if len(reports) == 1 {
		var ok bool
		ok, err = g.reports.Do(ctx, reports[0])
		accepted = []bool{ok}
	} else {
		accepted, err = g.finish(ctx, reports)
	}
	if err == nil {
		for q := range queues {
			g.dispatcher.Kick(q) // their slots are free
		}
	}
	return accepted, err
}

// finish records a batch of remote workers' reports
// (run.Applier.FinishInTx).
func (g *Gateway) finish(ctx context.Context, reports []run.Report) ([]bool, error) {
	a := &run.Applier{Dispatcher: g.dispatcher, Metrics: g.cfg.Metrics, Failpoints: g.cfg.Failpoints}
	return a.FinishInTx(ctx, g.cfg.StatePool, reports, func() {})
}
