// Package worker runs worker pools: River clients for the queues this
// process serves, each attempt through an executor, under the worker
// process's lease (one row, renewed every third of the TTL, which is also
// the lease of every task it runs), and results
// reported under the task's fencing token.
//
// A worker binary of your own registers Go handlers by name:
//
//	w, err := worker.New(worker.Config{
//		StatePool: pool, Queues: map[string]int{"etl": 10},
//		Handlers: map[string]executor.HandlerFunc{"load-warehouse": load},
//	})
//	err = w.Run(ctx)
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/batch"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/notify"
	"github.com/orrery-dev/orrery/internal/riverproc"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/tracing"
)

// QueueDBs says which PostgreSQL database holds each queue's River
// tables: ByQueue's for the queues it names, Default's for the others.
type QueueDBs = dispatch.QueueDBs

// Config configures a worker process.
type Config struct {
	// StatePool is Orrery's state database.
	StatePool *pgxpool.Pool
	// QueueDBs are the databases of every queue's River tables (the tasks
	// this worker releases, retries and children, may be of other queues);
	// default StatePool for all. This worker's own queues must share one.
	QueueDBs QueueDBs
	// Queues maps each queue this worker serves to its concurrency.
	Queues map[string]int
	// Tenants binds the worker to tenants (names): it serves each of its
	// queues for them only, through each tenant's own queue QUEUE|TENANT
	// (with the queue's concurrency for each tenant), and binds those
	// queues when it starts, so that their tasks go nowhere else (see
	// package dispatch). None: a shared worker, serving every tenant whose
	// queue is not bound.
	Tenants []string
	// Name identifies the worker in attempts; default host-pid.
	Name string
	// LeaseTTL is how long a task's lease lasts without renewal; a worker
	// that dies has its tasks retried once it lapses. Default 15 s.
	LeaseTTL time.Duration
	// AllowCommand lists the programs command steps may run: absolute
	// path.Match patterns, or "*" (see executor.CommandRunner); empty
	// refuses every command step.
	AllowCommand []string
	// AllowEnv lists the variable names a command step's env may set
	// (executor.CommandRunner.AllowEnv); empty: any but the risky ones.
	AllowEnv []string
	// Sandbox runs command steps in bubblewrap (executor.Sandbox): their own
	// /proc and /tmp, the system's programs read-only, nothing else of the
	// machine but the paths it allows. Nil: plain child processes. When it
	// is asked for and cannot run here, the worker says so at start and
	// refuses command steps.
	Sandbox *SandboxConfig
	// CommandUser runs command steps as this account (a name or id; the
	// worker must run as root), so that they cannot read the worker's files
	// and process; empty: as the worker's own user.
	CommandUser string
	// StepLimits bound each command step's processes, memory and file
	// size (executor.Ceilings: cgroups where the worker may make them,
	// rlimits otherwise); nil: executor.DefaultLimits. A zero field leaves
	// that one unbounded.
	StepLimits *executor.Limits
	// Secrets says which secret references (secret://env/NAME,
	// secret://file/PATH) the steps of each namespace may resolve on this
	// worker; the zero value resolves none.
	Secrets executor.SecretPolicy
	// AllowEgress lists the address ranges webhooks may reach although
	// the egress policy refuses them by default (loopback, private,
	// link-local, ...: see executor.EgressPolicy). Unused when HTTPClient
	// is set.
	AllowEgress []netip.Prefix
	// Capacity is what this worker has for the tasks it runs at once
	// (docs/resources.md): cpu, memory, gpus and named counts. The zero
	// vector takes the machine's (MachineCapacity).
	Capacity resources.Vector
	// Handlers are the Go steps this binary implements, by name.
	Handlers map[string]executor.HandlerFunc
	// HTTPClient calls webhooks; default executor.NewHTTPClient with
	// AllowEgress, without a global timeout (each attempt has its step's
	// timeout). A client of your own decides where webhooks may connect.
	HTTPClient *http.Client
	// FetchCooldown and FetchPollInterval tune River's fetching: River's
	// defaults (100 ms, 1 s) cap a client at MaxWorkers jobs per cooldown.
	// Defaults 10 ms, 100 ms.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	Logger            *slog.Logger
	// Failpoints arms this worker's test seams (FailpointFetched,
	// FailpointStarted, FailpointRenewed); nil in production.
	Failpoints *failpoint.Set
	// Metrics records attempts, schedule lag and finished runs; nil: none.
	Metrics *metrics.Metrics

	sandbox     *executor.Sandbox   // Sandbox's, when it runs here
	ceilings    *executor.Ceilings  // StepLimits', when command steps run here
	noSandbox   error               // why Sandbox does not run here
	queuePool   *pgxpool.Pool       // the database of this worker's queues
	commandUser *syscall.Credential // CommandUser's
	// baseQueues are the queues a bound worker binds (Queues' names, before
	// withDefaults made them its tenants' bound queues).
	baseQueues []string
}

// SandboxConfig is what a worker's sandbox allows besides the system's
// programs (executor.Sandbox).
type SandboxConfig struct {
	// ReadOnly and ReadWrite are the absolute paths steps may read, and
	// read and write.
	ReadOnly  []string
	ReadWrite []string
	// Network shares the worker's network with steps; default none.
	Network bool
}

// The worker's failpoints (see package failpoint).
const (
	// FailpointFetched is hit when River has handed a job to this worker,
	// before its attempt starts.
	FailpointFetched = "worker/fetched"
	// FailpointRenewed is hit after a lease renewal and the check of the
	// worker's attempts returned, before the attempts found lost are
	// cancelled.
	FailpointRenewed = "worker/renewed"
	// FailpointStarted is hit when an attempt has started (its lease is
	// taken), before its executor runs.
	FailpointStarted = "worker/started"
	// FailpointReporting is hit when an attempt's executor has returned,
	// before its report.
	FailpointReporting = "worker/reporting"
	// FailpointOwnAttempt is hit when a work call found its attempt
	// started on this worker already (run.OwnAttempt), before it decides
	// whether to run it.
	FailpointOwnAttempt = "worker/own-attempt"
	// FailpointStartCommitted is hit when a batch of starts has committed,
	// before its answer is used; armed with ErrAt, the answer is lost, as
	// when the connection is cut at COMMIT.
	FailpointStartCommitted = "worker/start-committed"
	// FailpointSettled is hit when a batch of reports whose steps failed
	// for good with dependents (run.Report.Cascades) has written them and
	// their descendants, before it commits.
	FailpointSettled = "worker/settled"
)

func (c *Config) withDefaults() error {
	if c.StatePool == nil {
		return errors.New("worker: Config.StatePool is required")
	}
	if c.Capacity.IsZero() {
		c.Capacity = MachineCapacity()
	}
	if len(c.Queues) == 0 {
		return errors.New("worker: Config.Queues: serve at least one queue (--queue NAME=CONCURRENCY)")
	}
	for q, n := range c.Queues {
		if q == dispatch.HandoffQueue || dispatch.IsRemote(q) {
			return fmt.Errorf("worker: Config.Queues: %q is a queue of remote steps, which remote workers claim through an API node (docs/remote-workers.md)", q)
		}
		if n <= 0 || n > river.QueueNumWorkersMax {
			return fmt.Errorf("worker: Config.Queues[%q]: concurrency %d: want 1 to %d (River's bound per queue and process: run more workers)", q, n, river.QueueNumWorkersMax)
		}
	}
	if len(c.Tenants) == 0 {
		for q := range c.Queues {
			if dispatch.BaseQueue(q) != q {
				return fmt.Errorf("worker: Config.Queues: %q is a tenant's bound queue: serve it with Config.Tenants (--tenant) and its queue", q)
			}
		}
	} else {
		c.baseQueues = slices.Sorted(maps.Keys(c.Queues))
		bound := make(map[string]int, len(c.Queues)*len(c.Tenants))
		for _, t := range c.Tenants {
			for q, n := range c.Queues {
				b, err := dispatch.BoundQueue(q, t)
				if err != nil {
					return fmt.Errorf("worker: Config.Tenants: %w", err)
				}
				bound[b] = n
			}
		}
		c.Queues = bound
	}
	if c.QueueDBs.Default == nil {
		c.QueueDBs.Default = c.StatePool
	}
	var own *pgxpool.Pool
	for _, q := range slices.Sorted(maps.Keys(c.Queues)) {
		if p := c.QueueDBs.For(q); own == nil {
			own = p
		} else if p != own {
			return fmt.Errorf("worker: Config.Queues: queue %q is in another queue database than the others: run one worker per queue database", q)
		}
	}
	c.queuePool = own
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 15 * time.Second
	}
	if c.LeaseTTL < time.Second {
		return errors.New("worker: Config.LeaseTTL must be at least 1s")
	}
	if err := executor.CheckAllow(c.AllowCommand); err != nil {
		return fmt.Errorf("worker: Config.AllowCommand: %w", err)
	}
	if err := executor.CheckAllowEnv(c.AllowEnv); err != nil {
		return fmt.Errorf("worker: Config.AllowEnv: %w", err)
	}
	if c.CommandUser != "" {
		u, err := executor.LookupUser(c.CommandUser)
		if err != nil {
			return fmt.Errorf("worker: Config.CommandUser: %w", err)
		}
		c.commandUser = u
	}
	if c.Sandbox != nil && len(c.AllowCommand) > 0 {
		sb, err := executor.NewSandbox(c.Sandbox.ReadOnly, c.Sandbox.ReadWrite, c.Sandbox.Network, c.commandUser)
		switch {
		case errors.Is(err, executor.ErrNoSandbox):
			c.noSandbox = err
		case err != nil:
			return fmt.Errorf("worker: Config.Sandbox: %w", err)
		}
		c.sandbox = sb
	}
	if len(c.AllowCommand) > 0 {
		limits := executor.DefaultLimits
		if c.StepLimits != nil {
			limits = *c.StepLimits
		}
		ceilings, err := executor.NewCeilings(limits, c.commandUser)
		if err != nil {
			return fmt.Errorf("worker: Config.StepLimits: %w", err)
		}
		c.ceilings = ceilings
	}
	if err := c.Secrets.Validate(); err != nil {
		return fmt.Errorf("worker: Config.Secrets: %w", err)
	}
	if c.HTTPClient == nil {
		c.HTTPClient = executor.NewHTTPClient(&executor.EgressPolicy{Allow: c.AllowEgress})
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

// Worker runs the queues of one process. It holds a lease of its own in
// the workers table, which is also its running tasks' lease: River jobs fetched
// under its id (its River client id) while it was alive are redelivered
// by the reaper once that lease lapses, if their attempt never started.
type Worker struct {
	cfg       Config
	id        uuid.UUID
	starter   *batch.Batcher[run.Start, *run.Attempt]
	completer *batch.Batcher[run.Report, bool]
	// cascades finishes the reports that settle a step's descendants
	// (run.Report.Cascades) in batches of their own: one large pipeline's
	// failure never holds up a batch of other runs' reports.
	cascades   *batch.Batcher[run.Report, bool]
	runner     *executor.Runner
	gate       *gate // what the attempts running here ask for, within Config.Capacity
	dispatcher *dispatch.Dispatcher
	river      *river.Client[pgx.Tx]
	riverPool  *pgxpool.Pool // the River client's (riverproc.ReadCommitted), closed when Run ends
	deliverer  *notify.Deliverer
	queueNames []string // cfg.Queues' names, sorted

	ledger *ledger // the attempts it runs, their leases and reports
	// reporting is set while a pass reports orphans (reporters runs it).
	reporting atomic.Bool
	reporters sync.WaitGroup
}

// beatsPerTTL is how many heartbeats one lease TTL holds.
const beatsPerTTL = riverproc.BeatsPerTTL

// errLeaseLost cancels an attempt whose task was cancelled or taken away.
var errLeaseLost = errors.New("the task was cancelled or its lease was lost")

// New prepares a worker; Run starts it.
func New(cfg Config) (*Worker, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	d, err := dispatch.ForQueues(cfg.StatePool, cfg.QueueDBs) // retries and children
	if err != nil {
		return nil, err
	}
	d.ObserveAdmissions(cfg.Metrics.AdmissionWait)
	w := &Worker{cfg: cfg, id: uuid.Must(uuid.NewV7()), dispatcher: d, ledger: newLedger(), gate: newGate(cfg.Capacity)}
	w.starter = batch.New("start attempts", cfg.Logger, w.startAttempts)
	w.completer = batch.New("report attempts", cfg.Logger, w.finishAttempts)
	w.cascades = batch.New("report failures with descendants", cfg.Logger, func(ctx context.Context, reports []run.Report) ([]bool, error) {
		return w.finish(ctx, reports, FailpointSettled)
	})
	secrets := &w.cfg.Secrets
	w.runner = &executor.Runner{HTTP: &executor.HTTPRunner{Client: cfg.HTTPClient, Secrets: secrets}, Handlers: cfg.Handlers}
	if len(cfg.AllowCommand) > 0 {
		w.runner.Command = &executor.CommandRunner{Allow: cfg.AllowCommand, Secrets: secrets, AllowEnv: cfg.AllowEnv, User: cfg.commandUser,
			Sandbox: cfg.sandbox, Ceilings: cfg.ceilings}
		cfg.Logger.Info("command steps' ceilings: " + cfg.ceilings.Describe())
		if cfg.sandbox != nil && os.Geteuid() == 0 && cfg.commandUser == nil {
			cfg.Logger.Warn("command steps run as root in the sandbox: they can read every root-owned file bound in (--sandbox-ro, --sandbox-rw); give --command-user")
		}
		if cfg.noSandbox != nil {
			w.runner.Command.Refused = "this worker refuses command steps: " + cfg.noSandbox.Error() + "; install bubblewrap, or start the worker with --sandbox=off"
			cfg.Logger.Error("COMMAND STEPS WILL BE REFUSED: " + cfg.noSandbox.Error() + "; install bubblewrap, or start the worker with --sandbox=off to run them unsandboxed")
		}
	}
	w.queueNames = slices.Sorted(maps.Keys(cfg.Queues))
	w.deliverer, err = notify.New(notify.Config{Pool: cfg.StatePool, Queues: w.queueNames, Client: cfg.HTTPClient, Secrets: secrets,
		Logger: cfg.Logger, Metrics: cfg.Metrics})
	if err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &taskWorker{w: w}); err != nil {
		return nil, err
	}
	queues := make(map[string]river.QueueConfig, len(cfg.Queues))
	for q, n := range cfg.Queues {
		queues[q] = river.QueueConfig{MaxWorkers: n}
	}
	if w.riverPool, err = riverproc.ReadCommitted(cfg.queuePool); err != nil {
		return nil, fmt.Errorf("worker: river: %w", err)
	}
	w.river, err = river.NewClient(riverpgxv5.New(w.riverPool), &river.Config{
		ID:                w.id.String(), // how the reaper finds what a dead worker fetched
		Queues:            queues,
		Workers:           workers,
		FetchCooldown:     cfg.FetchCooldown,
		FetchPollInterval: cfg.FetchPollInterval,
		JobTimeout:        -1, // each attempt has its step's timeout
		Logger:            riverproc.RiverLogger(cfg.Logger),
	})
	if err != nil {
		return nil, fmt.Errorf("worker: river: %w", err)
	}
	return w, nil
}

// Run works until ctx ends, then stops fetching, lets running attempts
// finish for up to the lease TTL, and cancels the rest.
func (w *Worker) Run(ctx context.Context) error {
	defer w.riverPool.Close() // last: River is stopped by then
	if w.cfg.ceilings != nil {
		defer w.cfg.ceilings.Close() // after the attempts end
	}
	// The bindings before anything is fetched: from their commit on, the
	// shared pool of these queues gets none of these tenants' new tasks.
	if err := dispatch.Bind(ctx, w.cfg.StatePool, w.cfg.Tenants, w.cfg.baseQueues, w.cfg.Name); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	// The lease first: nothing may be fetched under an id the reaper
	// does not know.
	if err := w.beat(ctx); err != nil {
		return fmt.Errorf("worker: register: %w", err)
	}
	if err := riverproc.StartRiver(ctx, w.river); err != nil {
		return fmt.Errorf("worker: start river: %w", err)
	}
	if len(w.cfg.Tenants) == 0 {
		w.cfg.Logger.Info("worker started, shared by every tenant whose queue is not bound (--tenant binds it)", "name", w.cfg.Name, "queues", w.cfg.Queues)
	} else {
		w.cfg.Logger.Info("worker started, bound to its tenants", "name", w.cfg.Name, "queues", w.cfg.Queues, "tenants", w.cfg.Tenants)
	}
	hbDone := make(chan struct{})
	hbCtx, stopHB := context.WithCancel(context.WithoutCancel(ctx))
	go func() { defer close(hbDone); w.heartbeat(hbCtx) }()
	// The start and report batchers need no goroutine of their own (their
	// lanes come and go with requests). Notifications of this worker's
	// queues, and their admission (after the lease, so that its slots
	// count), run until the worker stops.
	var background sync.WaitGroup
	notifyCtx, stopNotify := context.WithCancel(context.WithoutCancel(ctx))
	background.Go(func() { _ = w.deliverer.Run(notifyCtx) })
	background.Go(func() {
		_ = w.dispatcher.Admit(notifyCtx, dispatch.AdmitConfig{Pool: w.cfg.StatePool, Queues: w.queueNames,
			Logger: w.cfg.Logger, Failpoints: w.cfg.Failpoints})
	})
	defer func() { stopNotify(); background.Wait() }()
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), w.cfg.LeaseTTL)
	defer cancel()
	err := w.river.Stop(stopCtx)
	if err != nil {
		err = w.river.StopAndCancel(context.Background())
	}
	stopHB()
	<-hbDone
	w.reporters.Wait()
	w.flushUnreported()
	// A start or report its caller gave up on may still be being written.
	w.starter.Wait()
	w.completer.Wait()
	w.cascades.Wait()
	if err == nil { // River stopped cleanly: nothing of ours is left running there
		leaveCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if lerr := store.New(w.cfg.StatePool).LeaveWorker(leaveCtx, w.id); lerr != nil {
			w.cfg.Logger.Warn("worker: end lease", "err", lerr)
		}
	}
	return err
}

// beat renews this worker's own lease (registering it the first time).
func (w *Worker) beat(ctx context.Context) error {
	enforces := ""
	if w.cfg.ceilings != nil {
		enforces = w.cfg.ceilings.Enforces()
	}
	return riverproc.RenewLease(ctx, w.cfg.StatePool, w.id, w.cfg.Name, w.cfg.Queues, w.cfg.Tenants, &w.cfg.Capacity, enforces, w.cfg.LeaseTTL)
}

// heartbeat renews, every third of the lease TTL, this worker's lease,
// which is the lease of every task it runs (one row, whatever it runs),
// then asks which of its attempts are no longer its own and cancels them.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.cfg.LeaseTTL / beatsPerTTL)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The attempts running before the renewal: the ones it confirms.
		asked := w.ledger.snapshot()
		// Each statement is bounded by a beat, so that a hung connection
		// cannot hold the loop while the lease lapses.
		beatCtx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL/beatsPerTTL)
		err := w.beat(beatCtx)
		cancel()
		if err != nil && ctx.Err() == nil {
			w.cfg.Logger.Error("renew worker lease", "err", err)
		}
		w.checkTasks(ctx, asked, err == nil)
	}
}

// checkTasks settles the attempts asked about after a renewal: a renewal
// that succeeded confirms them; then the database says which are no
// longer this worker's (cancelled, reaped, taken away), and those are
// cancelled. It decides only about the attempts it asked for: one that
// started after the snapshot is left alone, as is an attempt of the same
// task that replaced the one asked about. A renewal that fails or times
// out (the database is unreachable or this process was stalled) confirms
// nothing: an attempt whose lease has gone unconfirmed for a whole TTL is
// cancelled, since the reaper may already be retrying it elsewhere.
// Last, the orphans the database holds here are reported (see orphans).
func (w *Worker) checkTasks(ctx context.Context, asked map[uuid.UUID]*leased, renewed bool) {
	var held []store.RunningOnRow
	check := w.beginCheck()
	beatCtx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL/beatsPerTTL)
	defer cancel()
	err := store.Retry(beatCtx, func() error {
		var err error
		held, err = store.New(w.cfg.StatePool).RunningOn(beatCtx, &w.id)
		return err
	})
	var ours map[uuid.UUID]int64
	if err == nil {
		ours = make(map[uuid.UUID]int64, len(held))
		for _, h := range held {
			ours[h.ID] = h.FencingToken
		}
	}
	if err != nil && ctx.Err() == nil {
		w.cfg.Logger.Error("check running tasks", "err", err)
	}
	if err == nil && len(asked) > 0 {
		w.cfg.Failpoints.Hit(FailpointRenewed)
	}
	for _, e := range w.ledger.settle(asked, ours, renewed, beatsPerTTL) {
		e.cancel(errLeaseLost)
	}
	// Orphans are reported off the heartbeat, one pass at a time, so that
	// a slow report never delays the next renewal; while a pass runs, the
	// check leaves them for the next beat.
	if err == nil && w.reporting.CompareAndSwap(false, true) {
		reports := w.orphans(held, check)
		w.reporters.Go(func() {
			defer w.reporting.Store(false)
			w.reportOrphans(ctx, reports)
		})
	}
}

// beginCheck counts a check of running tasks begun (ledger.beginCheck).
func (w *Worker) beginCheck() uint64 { return w.ledger.beginCheck() }

// orphans are the attempts held here (read by check number check) whose
// report was lost (ledger.orphans); those without a kept report are
// reported as lease_expired.
func (w *Worker) orphans(held []store.RunningOnRow, check uint64) []run.Report {
	tokens := make(map[uuid.UUID]int64, len(held))
	for _, h := range held {
		tokens[h.ID] = h.FencingToken
	}
	return w.ledger.orphans(tokens, check, func(task uuid.UUID, token int64) run.Report {
		return run.Report{TaskID: task, FencingToken: token, Result: run.LeaseExpired("the worker lost the attempt's report")}
	})
}

// reportOrphans reports orphans (see orphans), each in a transaction of
// its own (the report has no run id for a batch's lock order); one that
// fails is reported again at the next check.
func (w *Worker) reportOrphans(ctx context.Context, reports []run.Report) {
	for _, r := range reports {
		if ctx.Err() != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, accepted, err := w.reportAlone(rctx, r)
		cancel()
		if err != nil {
			w.cfg.Logger.Error("report an orphaned attempt", "task_id", r.TaskID, "err", err)
			w.ledger.suspect(r.TaskID, r.FencingToken) // at once at the next check
			continue
		}
		w.ledger.reported(r)
		w.cfg.Logger.Warn("reported an attempt whose report was lost", "task_id", r.TaskID, "accepted", accepted, "exit_reason", r.Result.ExitReason)
	}
}

// reportAlone sends one report in a transaction of its own (a report
// that fails fails alone). When the database refuses it for good, it sends
// refusedReport's in its place, and when that is refused too (the refusal
// was not about the step's text but a guard of the engine's own state),
// refusedAgain's: the attempt must end, or it would hold its task and its
// run for as long as this worker lives. It returns the report sent and
// whether its attempt took it (false: a stale token).
func (w *Worker) reportAlone(ctx context.Context, r run.Report) (run.Report, bool, error) {
	accepted, err := w.finishAttempts(ctx, []run.Report{r})
	for _, fallback := range []func(run.Report, error) (run.Report, bool){refusedReport, refusedAgain} {
		next, ok := fallback(r, err)
		if !ok {
			break
		}
		w.cfg.Logger.Error("an attempt's report was refused; reporting it otherwise", "task_id", r.TaskID, "err", err,
			"ok", next.Result.OK, "retryable", next.Result.Retryable)
		r = next
		accepted, err = w.finishAttempts(ctx, []run.Report{r})
	}
	if err != nil {
		return r, false, err
	}
	return r, accepted[0], nil
}

// refusal is the database's refusal of a report for good: a data
// exception or a constraint (SQLSTATE classes 22 and 23), which sending it
// again would meet again. Other errors (a lost connection, a serialization
// failure) are retried as they are.
func refusal(err error) (*pgconn.PgError, bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (!strings.HasPrefix(pe.Code, "22") && !strings.HasPrefix(pe.Code, "23")) {
		return nil, false
	}
	return pe, true
}

// refusedReport is the report to send instead of r when the database
// refused r for good: the same outcome (success, or the same failure,
// retryable or not) without the output and error the step produced, the
// refusal in their place.
func refusedReport(r run.Report, err error) (run.Report, bool) {
	pe, ok := refusal(err)
	if !ok {
		return r, false
	}
	r.Result.Output, r.Result.OutputTruncated, r.Result.Log = "", false, ""
	r.Result.Error = refusalNote(pe)
	return r, true
}

// refusalNote is the error a refused report is sent again with.
func refusalNote(pe *pgconn.PgError) string {
	return executor.StorableError("the attempt's report was refused by the database: " + pe.Message)
}

// refusedAgain is the report to send when refusedReport's was refused too:
// the attempt failed, retryably, saying why. Its step may run again; an
// attempt left running would keep its run from ending and be failed as
// lease_expired when this worker stops anyway.
func refusedAgain(r run.Report, err error) (run.Report, bool) {
	pe, ok := refusal(err)
	if !ok || !r.Result.OK && r.Result.Retryable && r.Result.FailureClass == executor.ClassSystem {
		// Nothing else to try: a report refused whatever it says (a guard
		// of the engine's state) stays loud, sent again every beat, and
		// its attempt held here until this worker stops.
		return r, false
	}
	r.Result = executor.Result{ExitReason: executor.ReasonError, FailureClass: executor.ClassSystem, Retryable: true, Error: refusalNote(pe)}
	return r, true
}

// flushUnreported reports once more, at shutdown, the reports that failed
// and are still kept, each in a transaction of its own as the orphan
// check does: before the worker's lease ends and the reaper would fail
// their attempts as lease_expired. One refused report must not take the
// others with it.
func (w *Worker) flushUnreported() {
	reports := w.ledger.allUnreported()
	if len(reports) == 0 {
		return
	}
	// One deadline for all: a shutdown must not wait on a slow database.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range reports {
		if _, _, err := w.reportAlone(ctx, r); err != nil {
			w.cfg.Logger.Warn("worker: a report at shutdown", "task_id", r.TaskID, "err", err)
		}
	}
}

// tooLargeSnooze is how long a task larger than this worker waits in its
// queue before a worker fetches it again (admission admits only a task
// some live worker of its queue could run).
const tooLargeSnooze = 2 * time.Second

// needOf is what a job's task asks for: in its args when admission knew
// it, else read.
func (w *Worker) needOf(ctx context.Context, job *river.Job[dispatch.TaskArgs]) (resources.Vector, error) {
	if job.Args.Need != nil {
		return *job.Args.Need, nil
	}
	rows, err := store.New(w.cfg.StatePool).TaskSizes(ctx, []uuid.UUID{job.Args.TaskID})
	if err != nil || len(rows) == 0 {
		return resources.Vector{}, err // a task gone: its start finds nothing
	}
	r := rows[0]
	return resources.FromColumns(r.ResCpu, r.ResMemory, r.ResGpu, r.ResCustom), nil
}

// taskWorker is the River worker for every Orrery task.
type taskWorker struct {
	river.WorkerDefaults[dispatch.TaskArgs]
	w *Worker
}

func (tw *taskWorker) Work(ctx context.Context, job *river.Job[dispatch.TaskArgs]) error {
	return tw.w.work(ctx, job)
}

// work runs one attempt: start it (in a batch of starts: one statement),
// execute it, report it (in a batch of reports: one transaction, each
// fenced by its attempt's token). River completes its job
// when work returns, in its batched completer: completing each job inside
// the report's transaction (river.JobCompleteTx) was the most expensive
// statement of the whole path (River's many-row completion query run for
// one row: a third of PostgreSQL's time in the storm benchmark). If this
// process dies between the report's commit and River's completion, River
// rescues the job later and runs work again, which finds the attempt
// already started (StartAttempt returns nothing) and does nothing.
func (w *Worker) work(ctx context.Context, job *river.Job[dispatch.TaskArgs]) error {
	log := w.cfg.Logger.With("task_id", job.Args.TaskID, "attempt", job.Args.Attempt)
	w.ledger.hold(job.Args.TaskID, 1)
	defer w.ledger.hold(job.Args.TaskID, -1)
	w.cfg.Failpoints.Hit(FailpointFetched)
	// The attempt starts once what it asks for fits what this worker's
	// running attempts leave (the gate); one larger than the whole worker
	// goes back to its queue for a worker it fits.
	need, err := w.needOf(ctx, job)
	if err != nil {
		return fmt.Errorf("read the task's resources: %w", err) // River retries the job
	}
	if !w.gate.fits(need) {
		log.Info("the task asks for more than this worker has: left to a larger worker", "needs", need.String(), "capacity", w.cfg.Capacity.String())
		return river.JobSnooze(tooLargeSnooze)
	}
	release, err := w.gate.acquire(ctx, need, job.Args.Reserve)
	if err != nil { // shutting down: another worker takes it at once
		return river.JobSnooze(0)
	}
	// The room is held until the report is written (work returns): what
	// the tasks table shows running on this worker at once never asks
	// for more than it has.
	defer release()
	att, err := w.starter.Do(ctx, run.Start{TaskID: job.Args.TaskID, Attempt: job.Args.Attempt})
	if err != nil {
		return fmt.Errorf("start attempt: %w", err) // River retries the job
	}
	if att == nil {
		// This worker's own start may have committed while its answer was
		// lost (a connection cut at COMMIT): its batch was served again,
		// or River retried the job, and the task runs here already.
		ownCtx, cancelOwn := context.WithTimeout(ctx, 30*time.Second) // as a batch of starts is bounded
		att, err = run.OwnAttempt(ownCtx, w.cfg.StatePool, run.Start{TaskID: job.Args.TaskID, Attempt: job.Args.Attempt}, run.Worker{Name: w.cfg.Name, ID: w.id})
		cancelOwn()
		if err != nil {
			return fmt.Errorf("start attempt: %w", err) // River retries the job
		}
		if att != nil {
			w.cfg.Failpoints.Hit(FailpointOwnAttempt)
		}
	}
	if att == nil {
		log.Info("stale River job: its attempt started elsewhere or the task moved on")
		return nil
	}
	c := att.Call
	attemptCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	entry := w.ledger.begin(c.TaskID, c.FencingToken, cancel)
	if entry == nil {
		cancel(nil)
		log.Info("stale River job: its attempt runs or ran on this worker")
		return nil
	}
	if !att.FiredAt.IsZero() {
		w.cfg.Metrics.ScheduleLag(att.StartedAt.Sub(att.FiredAt)) // both on the database's clock
	}
	defer func() {
		w.ledger.end(c.TaskID, entry)
		cancel(nil)
	}()
	stop := context.AfterFunc(ctx, func() { cancel(errors.New("worker shutting down")) })
	defer stop()

	w.cfg.Failpoints.Hit(FailpointStarted)
	runCtx, cancelTimeout := context.WithTimeout(attemptCtx, att.Timeout)
	runCtx, endSpans := startAttemptSpans(runCtx, att)
	var res executor.Result
	if att.Refused != nil { // an expression of the step failed: it does not run
		res = *att.Refused
	} else {
		res = w.runner.Run(runCtx, c)
	}
	endSpans(res)
	cancelTimeout()
	leaseLost := errors.Is(context.Cause(attemptCtx), errLeaseLost)
	switch {
	case leaseLost && !res.OK:
		res = run.LeaseExpired("the worker stopped the attempt: " + errLeaseLost.Error())
	case !res.OK && context.Cause(attemptCtx) != nil:
		res.Error = context.Cause(attemptCtx).Error()
	}
	log.Debug("attempt finished", "ok", res.OK, "exit_reason", res.ExitReason)

	// Report even while shutting down: the attempt is done.
	w.cfg.Failpoints.Hit(FailpointReporting)
	reportCtx, cancelReport := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelReport()
	report := run.Report{TaskID: c.TaskID, RunID: c.RunID, FencingToken: c.FencingToken, Result: res, Shape: &att.Shape, LeaseLost: leaseLost}
	reports := w.completer
	if report.Cascades() {
		reports = w.cascades
	}
	accepted, err := reports.Do(reportCtx, report)
	if err != nil {
		// Kept for the orphan check, which sends it again with the worker
		// vouching that the attempt is over: its token alone fences it (a
		// lost-lease report applies only to a lapsed lease, and this
		// worker's is renewed).
		report.LeaseLost = false
		w.ledger.keepUnreported(report)
		return err
	}
	if !accepted && report.LeaseLost {
		// The lease was not lapsed after all (a renewal this worker took
		// for failed had committed): the attempt is still this worker's,
		// and its token alone fences the report. Sent as the lost-lease
		// report was, it would leave the task running here, and the orphan
		// check would fail it as lease_expired, success or not.
		report.LeaseLost = false
		if accepted, err = reports.Do(reportCtx, report); err != nil {
			w.ledger.keepUnreported(report)
			return err
		}
	}
	if !accepted {
		log.Warn("stale report rejected: the task's fencing token moved on", "token", c.FencingToken)
		return nil
	}
	outcome, exit := lifecycle.AttemptSucceeded, res.ExitReason
	if !res.OK {
		outcome = lifecycle.AttemptFailed
	}
	if exit == "" {
		exit = "none"
	}
	w.cfg.Metrics.Attempt(string(outcome), exit)
	return nil
}

// startAttemptSpans continues the run's trace (when it has one): the
// task's time in the queue, from its release to this start (both on the
// database's clock), and the attempt with the executor's call inside it.
// The returned func ends them with the attempt's result.
func startAttemptSpans(ctx context.Context, att *run.Attempt) (context.Context, func(executor.Result)) {
	if att.TraceParent == "" {
		return ctx, func(executor.Result) {}
	}
	ctx = tracing.FromTraceParent(ctx, att.TraceParent)
	c := att.Call
	attrs := []attribute.KeyValue{attribute.String("orrery.run_id", c.RunID.String()), attribute.String("orrery.task_id", c.TaskID.String()),
		attribute.String("orrery.namespace", c.Namespace), attribute.String("orrery.job", c.Job), attribute.String("orrery.step", c.Step),
		attribute.Int("orrery.attempt", c.Attempt)}
	if att.ReleasedAt != nil && c.Attempt == 1 {
		_, q := tracing.Tracer().Start(ctx, "orrery.queue", trace.WithTimestamp(*att.ReleasedAt), trace.WithAttributes(attrs...))
		q.End(trace.WithTimestamp(att.StartedAt))
	}
	ctx, attempt := tracing.Tracer().Start(ctx, "orrery.attempt", trace.WithAttributes(attrs...))
	kind := "handler"
	switch {
	case c.Executor.HTTP != nil:
		kind = "http"
	case c.Executor.Command != nil:
		kind = "command"
	}
	ctx, exec := tracing.Tracer().Start(ctx, "orrery.executor", trace.WithAttributes(attribute.String("orrery.executor", kind)))
	return ctx, func(res executor.Result) {
		for _, sp := range []trace.Span{exec, attempt} {
			if !res.OK {
				sp.SetStatus(codes.Error, res.ExitReason+": "+res.Error)
			}
			sp.SetAttributes(attribute.String("orrery.exit_reason", res.ExitReason))
			sp.End()
		}
	}
}
