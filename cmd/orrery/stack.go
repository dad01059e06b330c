package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/orrery-dev/orrery/api"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/gateway"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/tracing"
	"github.com/orrery-dev/orrery/webui"
)

// stackFlags configure what one process runs: API, scheduler node, workers.
type stackFlags struct {
	addr         string
	name         string
	shardTTL     time.Duration
	misfireAfter time.Duration
	workers      []string
	allowCommand []string
	allowEnv     []string
	allowEgress  []string
	secretEnv    []string
	secretDir    []string
	allowedHosts []string
	tenants      []string
	commandUser  string
	sandboxMode  string
	sandboxRO    []string
	sandboxRW    []string
	sandboxNet   bool
	stepProcs    int
	stepMemory   string
	stepFileSize string
	leaseTTL     time.Duration
	idleInTx     time.Duration
	maxRequest   int64
	auth         string
	secureCookie bool
	metricsAddr  string
	retention    time.Duration
	archiveDir   string
	noScheduler  bool
	capacity     string
}

func (f *stackFlags) register(fs *pflag.FlagSet, withAPI bool) {
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "also serve Prometheus metrics on this address, without a key (an operator's network); serve and dev always serve them on the API address at /metrics for a system admin key")
	fs.StringArrayVar(&f.allowedHosts, "allowed-host", nil, "a host name the API, web UI and metrics answer to (Host header, and a browser's Origin): a name, .example.com for every name under it, or * for any (repeatable); IP addresses, localhost and the listen address's name always (no DNS rebinding)")
	if withAPI {
		fs.DurationVar(&f.retention, "retention", 0, "keep finished runs (their tasks and attempts) this long; runs holding a dead letter are kept (default 168h; at least 72h; a tenant may override it)")
		fs.StringVar(&f.archiveDir, "archive-dir", "", "before pruning old runs, append them to gzip JSON Lines files per tenant and day in this folder")
		fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "address to serve the API on (env ORRERY_ADDR)")
		fs.StringVar(&f.name, "node-name", "", "this node's name in the cluster view (default host-pid)")
		fs.DurationVar(&f.shardTTL, "shard-ttl", 10*time.Second, "shard lease TTL: a dead node's shards move after it")
		fs.DurationVar(&f.misfireAfter, "misfire-after", time.Minute, "instants later than this go to the job's misfire policy")
		fs.BoolVar(&f.noScheduler, "no-scheduler", false, "serve the API only; fire nothing")
		fs.StringArrayVar(&f.workers, "worker", nil, "also run a worker pool in this process: QUEUE=CONCURRENCY (repeatable)")
		fs.Int64Var(&f.maxRequest, "max-request-bytes", api.DefaultMaxRequestBytes, "largest API request body, as sent and after decompression (ResourceExhausted beyond)")
		fs.BoolVar(&f.secureCookie, "secure-cookies", false, "mark the web UI's session cookie Secure even on plain HTTP here (TLS ends at a proxy in front); it is Secure anyway when this server terminates TLS")
		fs.StringVar(&f.auth, "auth", "keys", "keys: every call needs an API key (Authorization: Bearer ork_...); none: no authentication, every call an admin of the default tenant (experiments only, on a loopback --addr only)")
	} else {
		fs.StringArrayVar(&f.workers, "queue", nil, "serve this queue: NAME=CONCURRENCY (repeatable)")
		fs.StringVar(&f.name, "name", "", "worker name recorded on attempts (default host-pid)")
	}
	fs.StringArrayVar(&f.tenants, "tenant", nil, "bind the worker pools to this tenant (repeatable): they run its steps only, each queue through the tenant's own queue QUEUE|TENANT, bound when they start so that no shared pool runs its tasks of that queue again; none: pools shared by every tenant whose queue is not bound")
	fs.StringArrayVar(&f.allowCommand, "allow-command", nil, "programs command steps may run, as absolute path patterns (/opt/etl/*) matched on the real path, or * for any (repeatable); none by default")
	fs.StringVar(&f.sandboxMode, "sandbox", "on", "on: command steps run in bubblewrap (their own /proc and /tmp, the system's programs read-only, no network, nothing else of this machine but --sandbox-ro and --sandbox-rw); without bwrap, command steps are refused; off: plain child processes")
	fs.StringArrayVar(&f.sandboxRO, "sandbox-ro", nil, "a path command steps may read in the sandbox (repeatable), such as the folder of an allowed program")
	fs.StringArrayVar(&f.sandboxRW, "sandbox-rw", nil, "a path command steps may read and write in the sandbox (repeatable)")
	fs.BoolVar(&f.sandboxNet, "sandbox-network", false, "give command steps in the sandbox this machine's network (default none)")
	fs.IntVar(&f.stepProcs, "step-max-processes", executor.DefaultLimits.Processes, "ceiling of one command step's processes and threads together (cgroup pids where the worker may make cgroups, else RLIMIT_NPROC of --command-user); 0: none")
	fs.StringVar(&f.stepMemory, "step-max-memory", executor.Bytes(executor.DefaultLimits.Memory), "ceiling of one command step's memory (cgroup memory, else each process's address space), as 512MiB, 2GiB or bytes; past it the kernel kills the step; 0: none")
	fs.StringVar(&f.capacity, "capacity", "", "what the worker pools have for the tasks they run at once, as NAME=QUANTITY: cpu=16,memory=60Gi,gpu=2,licence=4 (names past cpu, memory and gpu are custom counts); default this machine's cores and memory less a tenth (at least 512Mi), no gpu")
	fs.StringVar(&f.stepFileSize, "step-max-file-size", executor.Bytes(executor.DefaultLimits.FileSize), "ceiling of a file one command step writes (RLIMIT_FSIZE), as 512MiB, 2GiB or bytes; 0: none")
	fs.StringVar(&f.commandUser, "command-user", "", "run command steps as this user (a name or id; the worker must run as root), so that they cannot read the worker's files, keys and process; default: the worker's own user")
	fs.StringArrayVar(&f.allowEnv, "allow-env", nil, "environment variable names a command step's env may set, as patterns (ETL_*, PASSWORD) (repeatable); by default any name but those that change which code a program runs (LD_*, PATH, GIT_*, PYTHON*...)")
	fs.StringArrayVar(&f.allowEgress, "allow-egress", nil, "address ranges webhooks may reach although refused by default (loopback, private, link-local, multicast, unspecified), as CIDRs: 127.0.0.1/32 (repeatable)")
	fs.StringArrayVar(&f.secretEnv, "secret-env", nil, "environment variables a tenant's namespace's secret://env/ references (its steps, webhooks and event sources) may read: TENANT/NAMESPACE=NAME[,NAME...], TENANT/* for every namespace of TENANT, NAME may be a pattern (HOOK_*) (repeatable); none by default")
	fs.StringArrayVar(&f.secretDir, "secret-dir", nil, "folder a tenant's namespace's secret://file/ references (its steps, webhooks and event sources) may read files in: TENANT/NAMESPACE=/path, TENANT/* for every namespace of TENANT (repeatable); none by default")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", 15*time.Second, "task lease TTL: a dead worker's tasks retry after it")
	fs.DurationVar(&f.idleInTx, "idle-tx-timeout", 0, "end a database session idle inside a transaction this long, so a stopped process cannot hold locks past its leases (default half the shortest lease TTL; negative: off)")
}

// parseBytes reads a size: bytes, or a number with KiB, MiB, GiB or TiB
// (Ki, Mi, Gi, Ti too, as Kubernetes writes them; a space between is
// allowed).
func parseBytes(s string) (int64, error) {
	t := strings.ReplaceAll(strings.TrimSpace(s), " ", "")
	shift := 0
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"B", 0}} {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, shift = rest, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is not a size (bytes, or with KiB, MiB, GiB, TiB)", s)
	}
	return n << shift, nil
}

// poolOptions bound the database sessions of this process: a process
// stopped inside a transaction loses its locks (and so its shards and
// tasks) within half its shortest lease. A negative --idle-tx-timeout
// turns the bound off (a connection pooler that refuses the setting).
func (f *stackFlags) poolOptions() (store.Options, error) {
	shortest := f.leaseTTL
	if f.shardTTL > 0 {
		shortest = min(shortest, f.shardTTL)
	}
	idle := f.idleInTx
	switch {
	case idle == 0:
		idle = shortest / 2
	case idle < 0:
		idle = 0
	case idle >= shortest:
		return store.Options{}, fmt.Errorf("--idle-tx-timeout %s: must be under the shortest lease TTL (%s), or a stopped process keeps its locks past its leases", idle, shortest)
	}
	return store.Options{IdleInTx: idle}, nil
}

// sandbox returns cfg with the worker sandbox flags applied:
// --allow-command, --allow-env, --allow-egress, --secret-env, --secret-dir.
func (f *stackFlags) sandbox(cfg worker.Config) (worker.Config, error) {
	if err := executor.CheckAllow(f.allowCommand); err != nil {
		return cfg, fmt.Errorf("--allow-command: %w", err)
	}
	cfg.AllowCommand = f.allowCommand
	if err := executor.CheckAllowEnv(f.allowEnv); err != nil {
		return cfg, fmt.Errorf("--allow-env %w", err)
	}
	cfg.AllowEnv = f.allowEnv
	cfg.CommandUser = f.commandUser
	limits := executor.Limits{Processes: f.stepProcs}
	if f.stepProcs < 0 {
		return cfg, fmt.Errorf("--step-max-processes %d: want 0 (none) or more", f.stepProcs)
	}
	var err error
	if limits.Memory, err = parseBytes(f.stepMemory); err != nil {
		return cfg, fmt.Errorf("--step-max-memory: %w", err)
	}
	if limits.FileSize, err = parseBytes(f.stepFileSize); err != nil {
		return cfg, fmt.Errorf("--step-max-file-size: %w", err)
	}
	cfg.StepLimits = &limits
	if f.capacity != "" {
		if cfg.Capacity, err = resources.ParseList(f.capacity); err != nil {
			return cfg, fmt.Errorf("--capacity: %w", err)
		}
		if cfg.Capacity.IsZero() {
			return cfg, errors.New("--capacity: give at least one resource (cpu=16,memory=60Gi), or leave it out for this machine's")
		}
	}
	switch f.sandboxMode {
	case "on":
		cfg.Sandbox = &worker.SandboxConfig{ReadOnly: f.sandboxRO, ReadWrite: f.sandboxRW, Network: f.sandboxNet}
	case "off":
		if len(f.sandboxRO)+len(f.sandboxRW) > 0 || f.sandboxNet {
			return cfg, errors.New("--sandbox-ro, --sandbox-rw and --sandbox-network need --sandbox=on")
		}
	default:
		return cfg, fmt.Errorf("--sandbox %q: want on or off", f.sandboxMode)
	}
	egress, err := executor.ParseEgress(f.allowEgress)
	if err != nil {
		return cfg, fmt.Errorf("--allow-egress %w", err)
	}
	cfg.AllowEgress = egress
	cfg.Secrets, err = f.secrets()
	return cfg, err
}

// secrets is the grants of --secret-env and --secret-dir: what a worker's
// steps and webhooks read, and what the API's event sources verify
// deliveries with.
func (f *stackFlags) secrets() (executor.SecretPolicy, error) {
	var p executor.SecretPolicy
	for _, v := range f.secretEnv {
		if err := p.AddEnv(v); err != nil {
			return p, fmt.Errorf("--secret-env %w", err)
		}
	}
	for _, v := range f.secretDir {
		if err := p.AddDir(v); err != nil {
			return p, fmt.Errorf("--secret-dir %w", err)
		}
	}
	return p, nil
}

// authenticator is what --auth asks for.
func (f *stackFlags) authenticator(acc *access.Service, log *slog.Logger) (api.Authenticator, error) {
	switch f.auth {
	case "keys":
		return api.KeyAuth{Access: acc}, nil
	case "none":
		if !api.IsLoopback(f.addr) {
			return nil, fmt.Errorf("--auth none serves a loopback --addr only (127.0.0.1, ::1, localhost), not %q: anyone who reached the port would act as an admin", f.addr)
		}
		log.Warn("AUTHENTICATION IS OFF (--auth none): anyone who reaches this port acts as an admin of the default tenant; for experiments only")
		return api.NoAuth{}, nil
	}
	return nil, fmt.Errorf("--auth %q: want keys or none", f.auth)
}

// failpoints arms the test seams named in ORRERY_FAILPOINTS (see package
// failpoint); tests that run this binary use it to stop a process at an
// exact point. Unset in production.
func failpoints() (*failpoint.Set, error) {
	fp, err := failpoint.Parse(os.Getenv("ORRERY_FAILPOINTS"))
	if err != nil {
		return nil, fmt.Errorf("ORRERY_FAILPOINTS: %w", err)
	}
	return fp, nil
}

// queues parses NAME=CONCURRENCY pairs.
func (f *stackFlags) queues() (map[string]int, error) {
	out := map[string]int{}
	for _, w := range f.workers {
		name, n, ok := strings.Cut(w, "=")
		c, err := strconv.Atoi(n)
		if !ok || err != nil || c <= 0 || name == "" {
			return nil, fmt.Errorf("%q: want QUEUE=CONCURRENCY, such as etl=10", w)
		}
		out[name] = c
	}
	return out, nil
}

// runStack runs the API and a scheduler node (and workers for queues, if
// any) until ctx ends.
// routes are served beside the API on its address (the dev sink).
func runStack(ctx context.Context, log *slog.Logger, state *pgxpool.Pool, queueDBs dispatch.QueueDBs, f stackFlags, queues map[string]int,
	handlers map[string]executor.HandlerFunc, routes map[string]http.Handler) error {
	stopTracing, err := tracing.Setup(ctx)
	if err != nil {
		return fmt.Errorf("OTEL_*: %w", err)
	}
	defer stopTracing(context.WithoutCancel(ctx))
	d, err := dispatch.ForQueues(state, queueDBs)
	if err != nil {
		return err
	}
	jobs, err := job.New(ctx, state, log)
	if err != nil {
		return err
	}
	mets := metrics.New()
	mets.WatchDatabase(state, queueDBs)
	d.ObserveAdmissions(mets.AdmissionWait)
	runs := run.NewService(state, jobs, d)
	runs.Metrics = mets
	fp, err := failpoints()
	if err != nil {
		return err
	}
	if f.maxRequest < 1<<10 {
		return fmt.Errorf("--max-request-bytes %d: at least 1024", f.maxRequest)
	}
	acc := access.New(state)
	auth, err := f.authenticator(acc, log)
	if err != nil {
		return err
	}
	// Every API node hands remote steps to the remote workers that call it.
	gw, err := gateway.New(gateway.Config{StatePool: state, QueueDBs: queueDBs, LeaseTTL: f.leaseTTL,
		Logger: log, Failpoints: fp, Metrics: mets})
	if err != nil {
		return err
	}
	secrets, err := f.secrets()
	if err != nil {
		return err
	}
	apiHandler := api.NewHandler(api.Services{Jobs: jobs, Runs: runs, State: state, Queues: queueDBs,
		Limits: api.Limits{MaxRequestBytes: f.maxRequest}, Auth: auth, Gateway: gw, Secrets: &secrets}, log)
	ui, err := webui.New(webui.Config{API: apiHandler, Access: acc, AuthOff: f.auth == "none", SecureCookies: f.secureCookie, Log: log})
	if err != nil {
		return err
	}
	hosts, err := api.NewHostPolicy(f.addr, f.allowedHosts)
	if err != nil {
		return fmt.Errorf("--allowed-host %w", err)
	}
	top := http.NewServeMux()
	top.Handle("/metrics", api.MetricsHandler(auth, mets.Handler()))
	top.Handle("/", webui.Mount(apiHandler, ui))
	var h http.Handler = top
	if len(routes) > 0 {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		for pattern, r := range routes {
			mux.Handle(pattern, r)
		}
		h = mux
	}
	srv, err := api.Listen(f.addr, hosts.Guard(api.WithClientSource(h)))
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	parts := []func(context.Context) error{srv.Serve, gw.Run}
	if !f.noScheduler {
		n, err := node.New(ctx, node.Config{Pool: state, Dispatcher: d, Name: f.name, ShardTTL: f.shardTTL, MisfireAfter: f.misfireAfter, Logger: log, Failpoints: fp, Metrics: mets,
			Retention: f.retention, ArchiveDir: f.archiveDir})
		if err != nil {
			return err
		}
		parts = append(parts, n.Run)
	} else {
		// The API's releases (triggers, replays) are admitted here.
		parts = append(parts, func(ctx context.Context) error {
			return d.Admit(ctx, dispatch.AdmitConfig{Pool: state, Logger: log, Failpoints: fp})
		})
	}
	if len(queues) > 0 {
		cfg, err := f.sandbox(worker.Config{StatePool: state, QueueDBs: queueDBs, Queues: queues, Tenants: f.tenants, Name: f.name, LeaseTTL: f.leaseTTL,
			Handlers: handlers, Logger: log, Failpoints: fp, Metrics: mets})
		if err != nil {
			return err
		}
		w, err := worker.New(cfg)
		if err != nil {
			return err
		}
		for _, c := range w.ResourceGauges() {
			mets.Register(c)
		}
		parts = append(parts, w.Run)
	}
	if f.metricsAddr != "" {
		serve, err := serveMetrics(f.metricsAddr, f.allowedHosts, mets)
		if err != nil {
			return err
		}
		parts = append(parts, serve)
	}
	log.Info("serving the API", "addr", "http://"+srv.Addr(), "scheduler", !f.noScheduler, "workers", queues)
	return runAll(ctx, parts...)
}

// runAll runs every part until ctx ends or one fails; then it stops the
// others and returns the first error.
func runAll(ctx context.Context, parts ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, p := range parts {
		wg.Go(func() {
			if err := p(ctx); err != nil {
				once.Do(func() { first = err })
			}
			cancel()
		})
	}
	wg.Wait()
	return first
}

// serveMetrics serves /metrics alone on addr (--metrics-addr), to the
// hosts allowed.
func serveMetrics(addr string, allowedHosts []string, mets *metrics.Metrics) (func(context.Context) error, error) {
	hosts, err := api.NewHostPolicy(addr, allowedHosts)
	if err != nil {
		return nil, fmt.Errorf("--allowed-host %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", mets.Handler())
	srv, err := api.Listen(addr, hosts.Guard(mux))
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	return srv.Serve, nil
}
