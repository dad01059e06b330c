package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgcluster"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/tracing"
	"github.com/orrery-dev/orrery/migrations"
	"github.com/orrery-dev/orrery/shard"
)

var dbCounter atomic.Int64

// freshDB makes a new migrated database in the benchmark cluster.
func freshDB(b *testing.B) *pgxpool.Pool {
	b.Helper()
	pool, _ := freshDBDSN(b)
	return pool
}

// freshDBDSN is freshDB, with the database's DSN for processes.
func freshDBDSN(b *testing.B) (*pgxpool.Pool, string) {
	b.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("bench_%d_%d", time.Now().Unix(), dbCounter.Add(1))
	admin, err := pgx.Connect(ctx, cluster.DSN("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	pool, err := store.Open(ctx, cluster.DSN(name)+"&pool_max_conns=60", store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	// Drop the database afterwards, so that autovacuum does not clean up
	// after one benchmark while the next is measured.
	b.Cleanup(func() {
		pool.Close()
		admin, err := pgx.Connect(ctx, cluster.DSN("postgres"))
		if err != nil {
			b.Errorf("drop database %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			b.Errorf("drop database %s: %v", name, err)
		}
	})
	if _, err := migrations.Up(ctx, pool); err != nil {
		b.Fatal(err)
	}
	if _, err := migrations.QueueUp(ctx, pool); err != nil {
		b.Fatal(err)
	}
	return pool, cluster.DSN(name)
}

type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

// BenchmarkRiverBare is the reference ceiling: River alone on the same
// database, 50,000 no-op jobs inserted in batches of 1,000, then drained by
// one client with 500 workers (FetchCooldown 10 ms, poll 100 ms, as Orrery's
// workers use, and as many workers as the engine benchmarks give Orrery).
// jobs/s is the drain alone; total-jobs/s counts the inserts' time too.
func BenchmarkRiverBare(b *testing.B) {
	const total = 50_000
	for range b.N {
		pool := freshDB(b)
		ctx := context.Background()
		var done atomic.Int64
		workers := river.NewWorkers()
		river.AddWorker(workers, &noopWorker{done: &done})
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			Queues: map[string]river.QueueConfig{"default": {MaxWorkers: 500}}, Workers: workers,
			FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond,
		})
		if err != nil {
			b.Fatal(err)
		}
		wal0, walB0 := walRecords(b, pool), walBytes(b, pool)
		pg0, self0 := postgresCPU(b), selfCPU(b)
		insertStart := time.Now()
		for i := 0; i < total; i += 1000 {
			params := make([]river.InsertManyParams, 1000)
			for k := range params {
				params[k] = river.InsertManyParams{Args: noopArgs{N: i + k}}
			}
			if _, err := client.InsertMany(ctx, params); err != nil {
				b.Fatal(err)
			}
		}
		insertTook := time.Since(insertStart)
		start := time.Now()
		if err := client.Start(ctx); err != nil {
			b.Fatal(err)
		}
		for deadline := start.Add(5 * time.Minute); done.Load() < total; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("deadline passed: %d of %d River jobs worked in 5 minutes", done.Load(), total)
			}
		}
		took := time.Since(start)
		pgCPU, selfCPU := postgresCPU(b)-pg0, selfCPU(b)-self0
		if err := client.Stop(ctx); err != nil {
			b.Fatalf("stop River: %v", err)
		}
		time.Sleep(600 * time.Millisecond) // statistics reach pg_stat_wal within 500 ms
		b.ReportMetric(float64(walRecords(b, pool)-wal0)/total, "wal-records/job")
		b.ReportMetric(float64(walBytes(b, pool)-walB0)/total, "wal-bytes/job")
		b.ReportMetric(total/insertTook.Seconds(), "inserts/s")
		b.ReportMetric(total/took.Seconds(), "jobs/s")
		b.ReportMetric(total/(took+insertTook).Seconds(), "total-jobs/s")
		// CPU per job, inserts and drain: the database's, and the client's
		// (this process).
		b.ReportMetric(ms(pgCPU)/total, "pg-cpu-ms/job")
		b.ReportMetric(ms(selfCPU)/total, "client-cpu-ms/job")
	}
}

// seedJobs writes n job definitions straight into the tables (COPY), all
// with the given spec and first fire time; creation is not what these
// benchmarks measure.
func seedJobs(b *testing.B, pool *pgxpool.Pool, prefix string, n int, spec dag.JobSpec, next time.Time) {
	b.Helper()
	seedTenantJobs(b, pool, job.DefaultTenant, prefix, n, spec, next)
}

// seedTenantJobs is seedJobs for a tenant (with namespace "default").
func seedTenantJobs(b *testing.B, pool *pgxpool.Pool, tenant uuid.UUID, prefix string, n int, spec dag.JobSpec, next time.Time) {
	b.Helper()
	ctx := context.Background()
	specJSON, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	var shards int
	if err := pool.QueryRow(ctx, "SELECT shard_count FROM cluster_settings").Scan(&shards); err != nil {
		b.Fatal(err)
	}
	var jobs, versions, schedules [][]any
	for i := range n {
		id := uuid.Must(uuid.NewV7())
		sh := int32(shard.Of(id, shards))
		jobs = append(jobs, []any{id, tenant, "default", fmt.Sprintf("%s-%07d", prefix, i), "", []byte("{}"), "active", int64(1), specJSON,
			sh, next, next, "bench", next, "bench"})
		versions = append(versions, []any{id, int64(1), tenant, "", []byte("{}"), specJSON, next, "bench"})
		schedules = append(schedules, []any{id, tenant, sh, next})
	}
	cols := []string{"id", "tenant_id", "namespace", "name", "description", "labels", "status", "version", "spec", "shard", "next_fire_at", "created_at", "created_by", "updated_at", "updated_by"}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, cols, pgx.CopyFromRows(jobs)); err != nil {
		b.Fatal(err)
	}
	vcols := []string{"job_id", "version", "tenant_id", "description", "labels", "spec", "created_at", "created_by"}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"job_versions"}, vcols, pgx.CopyFromRows(versions)); err != nil {
		b.Fatal(err)
	}
	scols := []string{"job_id", "tenant_id", "shard", "next_fire_at"}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"job_schedules"}, scols, pgx.CopyFromRows(schedules)); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE jobs, job_schedules"); err != nil {
		b.Fatal(err)
	}
}

// engine is a scheduler node and a worker pool running in this process.
// Whatever they would only log at level ERROR (a failed scheduler pass,
// reaper sweep, lease renewal, River job), and either of them stopping
// before the benchmark ends, fails the benchmark: figures measured past a
// failure would describe the failure, not the engine.
type engine struct {
	mu       sync.Mutex
	failures []string
	stopping bool
	// dispatcher is the node's: a run service built on it wakes the
	// node's admitter.
	dispatcher *dispatch.Dispatcher
	// log fails the benchmark on errors (for more workers of its own).
	log *slog.Logger
	// handled counts the calls of the noop handler: a benchmark waits on
	// it without querying the database it measures.
	handled atomic.Int64
}

func (e *engine) fail(msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.stopping {
		e.failures = append(e.failures, msg)
	}
}

// takeFailures returns the engine's failures so far and forgets them:
// for a benchmark that reports them rather than failing on them.
func (e *engine) takeFailures() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.failures
	e.failures = nil
	return f
}

// err says how the engine failed so far, if it did.
func (e *engine) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.failures) == 0 {
		return nil
	}
	return fmt.Errorf("the engine failed (%d errors); first ones:\n  %s", len(e.failures), strings.Join(e.failures[:min(len(e.failures), 10)], "\n  "))
}

// check fails the benchmark if the engine failed so far.
func (e *engine) check(b *testing.B) {
	b.Helper()
	if err := e.err(); err != nil {
		b.Fatal(err)
	}
}

// errorLog is a slog.Handler that turns every ERROR record into an engine
// failure and drops the rest.
type errorLog struct {
	e     *engine
	attrs []slog.Attr
}

func (h errorLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h errorLog) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Message)
	add := func(a slog.Attr) bool { fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value); return true }
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.e.fail(sb.String())
	return nil
}

func (h errorLog) WithAttrs(as []slog.Attr) slog.Handler {
	return errorLog{e: h.e, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h errorLog) WithGroup(string) slog.Handler { return h }

// startEngine runs a scheduler node and a worker pool with a no-op handler
// in this process until the benchmark ends; call check on the result while
// waiting and before reporting figures.
func startEngine(b *testing.B, pool *pgxpool.Pool, workers int) *engine {
	b.Helper()
	return startEngineOn(b, pool, "default", workers)
}

// startEngineOn is startEngine with a worker pool serving queue. Its
// handlers: noop, and sleep (200 ms).
func startEngineOn(b *testing.B, pool *pgxpool.Pool, queue string, workers int) *engine {
	b.Helper()
	e := &engine{}
	log := slog.New(errorLog{e: e})
	e.log = log
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel) // in case startEngine fails below
	d, err := dispatch.New()
	if err != nil {
		b.Fatal(err)
	}
	// ORRERY_BENCH_METRICS=on records the Prometheus metrics, as a serve
	// process does (they are off otherwise: nil).
	var mets *metrics.Metrics
	if os.Getenv("ORRERY_BENCH_METRICS") == "on" {
		mets = metrics.New()
	}
	// ORRERY_BENCH_TRACING=on exports traces, sampled at 1%, to an OTLP
	// receiver in this process that reads and drops them.
	if os.Getenv("ORRERY_BENCH_TRACING") == "on" {
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
		b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
		b.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
		b.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.01")
		stop, err := tracing.Setup(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = stop(context.Background()); sink.Close(); otel.SetTracerProvider(noop.NewTracerProvider()) })
	}
	// ORRERY_BENCH_FIRE=BATCH,PARALLEL sets the scheduler's batch and
	// parallel groups (default 500,2).
	var fireBatch, fireParallel int
	if v := os.Getenv("ORRERY_BENCH_FIRE"); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d", &fireBatch, &fireParallel); err != nil {
			b.Fatalf("ORRERY_BENCH_FIRE=%q: want BATCH,PARALLEL", v)
		}
	}
	d.ObserveAdmissions(mets.AdmissionWait)
	n, err := node.New(ctx, node.Config{Pool: pool, Dispatcher: d, ShardTTL: 10 * time.Second, Logger: log, Metrics: mets,
		FireBatch: fireBatch, FireParallel: fireParallel})
	if err != nil {
		b.Fatal(err)
	}
	e.dispatcher = d
	sleep := func(ctx context.Context, _ executor.Call) error {
		select {
		case <-time.After(200 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// ORRERY_BENCH_CAPACITY=cpu=64,memory=64Gi sets the worker's capacity
	// (default: the machine's).
	var capacity resources.Vector
	if v := os.Getenv("ORRERY_BENCH_CAPACITY"); v != "" {
		if capacity, err = resources.ParseList(v); err != nil {
			b.Fatalf("ORRERY_BENCH_CAPACITY: %v", err)
		}
	}
	w, err := worker.New(worker.Config{StatePool: pool, Queues: map[string]int{queue: workers}, Logger: log, Metrics: mets, Capacity: capacity,
		AllowEgress: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, // the HTTP sinks of BenchmarkFairFiring
		Handlers: map[string]executor.HandlerFunc{"noop": func(context.Context, executor.Call) error { e.handled.Add(1); return nil }, "sleep": sleep,
			"fail": func(context.Context, executor.Call) error {
				return executor.Permanent(errors.New("bench: fails for good"))
			}}})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 2)
	run := func(what string, f func(context.Context) error) {
		err := f(ctx)
		if ctx.Err() == nil { // stopped before the benchmark ended
			e.fail(fmt.Sprintf("%s stopped early: %v", what, err))
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", what, err)
		}
		done <- err
	}
	go run("node", n.Run)
	go run("worker", w.Run)
	b.Cleanup(func() {
		if err := e.err(); err != nil {
			b.Error(err)
		}
		e.mu.Lock()
		e.stopping = true // errors of the shutdown itself come back from Run
		e.mu.Unlock()
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				b.Error(err)
			}
		}
	})
	return e
}

// checkNoFailures fails the benchmark when any attempt failed or any run
// did not run to success (skipped, cancelled, failed, dead-lettered): the
// figures would then not be those of the work the benchmark asked for.
func checkNoFailures(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	var attempts, runs int
	var firstAttempt, firstRun string
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM attempts WHERE outcome NOT IN ('running', 'succeeded')),
		(SELECT COALESCE(min(outcome || ' ' || exit_reason || ': ' || error), '') FROM attempts WHERE outcome NOT IN ('running', 'succeeded')),
		(SELECT count(*) FROM runs WHERE status IN ('skipped', 'cancelled', 'failed', 'dead_lettered')),
		(SELECT COALESCE(min(status || ': ' || reason), '') FROM runs WHERE status IN ('skipped', 'cancelled', 'failed', 'dead_lettered'))`).
		Scan(&attempts, &firstAttempt, &runs, &firstRun)
	if err != nil {
		b.Fatal(err)
	}
	if attempts > 0 || runs > 0 {
		b.Fatalf("%d attempts failed (e.g. %q); %d runs did not succeed (e.g. %q)", attempts, firstAttempt, runs, firstRun)
	}
}

// walRecords is the cluster's count of WAL records written so far: a
// measure of the database work (rows and index entries written, locks
// taken, commits) that does not depend on how busy the machine is.
// envInt is the whole number in the environment variable name, else def.
func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}

// walBytes is the WAL the whole cluster wrote so far, in bytes.
func walBytes(b *testing.B, pool *pgxpool.Pool) int64 {
	var n int64
	if err := pool.QueryRow(context.Background(), "SELECT wal_bytes::bigint FROM pg_stat_wal").Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

func walRecords(b *testing.B, pool *pgxpool.Pool) int64 {
	var n int64
	if err := pool.QueryRow(context.Background(), "SELECT wal_records FROM pg_stat_wal").Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

func dbTime(b *testing.B, pool *pgxpool.Pool) time.Time {
	b.Helper()
	var t time.Time
	if err := pool.QueryRow(context.Background(), "SELECT now()").Scan(&t); err != nil {
		b.Fatal(err)
	}
	return t
}

// lagStats reads the start lag (scheduled instant -> first attempt start)
// of the runs scheduled in [from, until).
func lagStats(b *testing.B, pool *pgxpool.Pool, from, until time.Time) (n int, p50, p95, p99, maxLag time.Duration) {
	b.Helper()
	rows, err := pool.Query(context.Background(), `SELECT extract(epoch FROM a.started_at - r.scheduled_for)
		FROM runs r JOIN tasks t ON t.run_id = r.id JOIN attempts a ON a.task_id = t.id AND a.number = 1
		WHERE r.scheduled_for >= $1 AND r.scheduled_for < $2`, from, until)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var lags []time.Duration
	for rows.Next() {
		var s float64
		if err := rows.Scan(&s); err != nil {
			b.Fatal(err)
		}
		lags = append(lags, time.Duration(s*float64(time.Second)))
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if len(lags) == 0 {
		b.Fatal("no started runs in the window")
	}
	slices.Sort(lags)
	q := func(p float64) time.Duration { return lags[min(len(lags)-1, int(p*float64(len(lags))))] }
	return len(lags), q(0.50), q(0.95), q(0.99), lags[len(lags)-1]
}

func noopSpec(cron string) dag.JobSpec {
	r := dag.Resource{Metadata: dag.Metadata{Name: "x"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons(cron)}, Overlap: dag.OverlapAllow, Run: &dag.Executor{Handler: "noop"},
	}}
	r.Normalize()
	return r.Spec
}

// fanSpec is noopSpec whose step fans out to n items (for_each).
func fanSpec(cron string, n int) dag.JobSpec {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	r := dag.Resource{Metadata: dag.Metadata{Name: "x"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons(cron)}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "each", ForEach: "${{ [" + strings.Join(items, ", ") + "] }}", Run: dag.Executor{Handler: "noop"}}},
	}}
	r.Normalize()
	return r.Spec
}

// exprSpec is noopSpec with a param and a payload of five expressions
// over every kind of variable (ORRERY_BENCH_EXPRS=on in the storm), or
// the same payload with literal values (=literal): what a step's
// expressions cost beside the same step without them.
func exprSpec(cron string, exprs bool) dag.JobSpec {
	payload := `{"day": "${{ run.scheduled_for }}", "who": "${{ job.namespace + '/' + job.name }}", ` +
		`"region": "${{ params.region }}", "try": "${{ attempt }}", "id": "run ${{ run.id }}"}`
	if !exprs {
		payload = `{"day": "2026-11-28T00:00:00Z", "who": "default/storm-00001", "region": "eu", "try": "1", "id": "run 01a21f9f-ffca-72e4-a9a0-91d847f0d432"}`
	}
	r := dag.Resource{Metadata: dag.Metadata{Name: "x"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons(cron)}, Overlap: dag.OverlapAllow, Run: &dag.Executor{Handler: "noop"},
		Params:  map[string]dag.Param{"region": {Type: "string", Default: dag.Payload(`"eu"`)}},
		Payload: dag.Payload(payload),
	}}
	r.Normalize()
	if es := dag.Validate(&r); len(es) > 0 {
		panic(es)
	}
	return r.Spec
}

// BenchmarkSteadyFires: 500 jobs firing every second for 30 s, so 500 fires
// per second, end to end (scheduler -> River -> worker -> completion);
// reports start lag percentiles and completed runs per second.
func BenchmarkSteadyFires(b *testing.B) {
	for range b.N {
		steadyFires(b, freshDB(b))
	}
}

// steadyFires runs the steady benchmark once on pool.
func steadyFires(b *testing.B, pool *pgxpool.Pool) {
	const jobs = 500
	start := dbTime(b, pool).Truncate(time.Second).Add(2 * time.Second)
	seedJobs(b, pool, "steady", jobs, noopSpec("* * * * * *"), start)
	eng := startEngine(b, pool, 500)
	time.Sleep(time.Until(start) + 32*time.Second)
	eng.check(b)
	from, until := start.Add(2*time.Second), start.Add(30*time.Second)
	var completed int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM runs WHERE status = 'succeeded' AND scheduled_for >= $1 AND scheduled_for < $2", from, until).Scan(&completed); err != nil {
		b.Fatal(err)
	}
	// The lag figures are over every run of the window: wait (bounded)
	// for the ones that have not started yet rather than leave them out.
	want := jobs * int(until.Sub(from)/time.Second)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var created, started int
		if err := pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE started_at IS NOT NULL)
			FROM runs WHERE scheduled_for >= $1 AND scheduled_for < $2`, from, until).Scan(&created, &started); err != nil {
			b.Fatal(err)
		}
		if started == want {
			break
		}
		eng.check(b)
		if time.Now().After(deadline) {
			b.Fatalf("deadline passed: %d of %d runs of the window created, %d started, a minute after the window", created, want, started)
		}
	}
	checkNoFailures(b, pool)
	eng.check(b)
	n, p50, p95, p99, mx := lagStats(b, pool, from, until)
	printPhases(b, pool, from, until)
	printWorstInstants(b, pool, from, until, 3)
	b.ReportMetric(float64(n)/until.Sub(from).Seconds(), "started/s")
	b.ReportMetric(float64(completed)/until.Sub(from).Seconds(), "completed/s")
	b.ReportMetric(ms(p50), "p50-lag-ms")
	b.ReportMetric(ms(p95), "p95-lag-ms")
	b.ReportMetric(ms(p99), "p99-lag-ms")
	b.ReportMetric(ms(mx), "max-lag-ms")
}

// BenchmarkMidnightStorm: 10,000 cron jobs due at the same instant; reports
// the time until every one started and the lag distribution, and the
// end-to-end completion rate through the storm.
func BenchmarkMidnightStorm(b *testing.B) {
	for range b.N {
		midnightStorm(b, freshDB(b))
	}
}

// midnightStorm runs the storm once on pool.
func midnightStorm(b *testing.B, pool *pgxpool.Pool) {
	const jobs = 10_000
	{
		// ORRERY_BENCH_SLOTS sets the worker's slots (default 500).
		eng := startEngine(b, pool, envInt(b, "ORRERY_BENCH_SLOTS", 500))
		at := dbTime(b, pool).Truncate(time.Second).Add(8 * time.Second)
		cron := fmt.Sprintf("%d %d %d * * *", at.Second(), at.Minute(), at.Hour())
		spec := noopSpec(cron)
		switch os.Getenv("ORRERY_BENCH_EXPRS") {
		case "on":
			spec = exprSpec(cron, true)
		case "literal":
			spec = exprSpec(cron, false)
		}
		// ORRERY_BENCH_FANOUT=N: the same 10,000 step executions as
		// 10,000/N runs of one step fanning out to N items.
		runs := jobs
		if fan := envInt(b, "ORRERY_BENCH_FANOUT", 0); fan > 0 {
			runs, spec = jobs/fan, fanSpec(cron, fan)
		}
		// ORRERY_BENCH_RESOURCES=on: every step asks {cpu: 10m, memory: 16Mi}.
		if os.Getenv("ORRERY_BENCH_RESOURCES") == "on" {
			spec.Defaults.Resources = &dag.Resources{CPU: "10m", Memory: "16Mi"}
		}
		seedJobs(b, pool, "storm", runs, spec, at)
		time.Sleep(600 * time.Millisecond) // the seeding's statistics reach pg_stat_wal
		wal0, lsn0 := walRecords(b, pool), walLSN(b, pool)
		time.Sleep(time.Until(at))
		rows0 := rowWrites(b, pool)
		pg0, self0 := postgresCPU(b), selfCPU(b)
		deadline := time.Now().Add(2 * time.Minute)
		// Until every run's handler was called, wait in process: a query
		// of the runs every few milliseconds took 4% of the database's
		// time during the storm it measures.
		for eng.handled.Load() < jobs && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			eng.check(b)
		}
		// CPU from the instant to the last handler's call: the database's
		// and this process's (scheduler, worker, River), per run.
		pgCPU, selfCPU := postgresCPU(b)-pg0, selfCPU(b)-self0
		for ; ; time.Sleep(50 * time.Millisecond) {
			var created, started, done int
			// The storm's runs only (a database with history holds others).
			if err := pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE started_at IS NOT NULL), count(*) FILTER (WHERE status = 'succeeded')
				FROM runs WHERE tenant_id = $1 AND scheduled_for >= $2`, job.DefaultTenant, at).
				Scan(&created, &started, &done); err != nil {
				b.Fatal(err)
			}
			if done == runs {
				break
			}
			eng.check(b)
			if time.Now().After(deadline) {
				b.Fatalf("deadline passed: of %d runs, %d created, %d started, %d succeeded within 2 minutes", runs, created, started, done)
			}
		}
		checkNoFailures(b, pool)
		time.Sleep(600 * time.Millisecond)
		walPerRun := float64(walRecords(b, pool)-wal0) / float64(runs)
		// A backend whose statistics could not be flushed at once retries
		// within PostgreSQL's idle interval (10 s): the rows are read after.
		time.Sleep(10500 * time.Millisecond)
		rowsPerRun := printRowWrites(rows0, rowWrites(b, pool), runs)
		printWALRecords(b, pool, lsn0, walLSN(b, pool), runs)
		n, p50, p95, p99, mx := lagStats(b, pool, at, at.Add(time.Second))
		printPhases(b, pool, at, at.Add(time.Second))
		if n != jobs { // lagStats counts the steps' first attempts
			b.Fatalf("%d of %d steps started for the instant %v", n, jobs, at)
		}
		var lastDone, lastCreated time.Time
		if err := pool.QueryRow(context.Background(), "SELECT max(finished_at), max(created_at) FROM runs WHERE tenant_id = $1 AND scheduled_for >= $2",
			job.DefaultTenant, at).Scan(&lastDone, &lastCreated); err != nil {
			b.Fatal(err)
		}
		eng.check(b)
		printTableStats(b, pool)
		b.ReportMetric(float64(n), "started")
		b.ReportMetric(ms(lastCreated.Sub(at)), "all-created-ms")
		b.ReportMetric(ms(mx), "all-started-ms")
		b.ReportMetric(ms(p50), "p50-lag-ms")
		b.ReportMetric(ms(p95), "p95-lag-ms")
		b.ReportMetric(ms(p99), "p99-lag-ms")
		b.ReportMetric(float64(runs)/lastDone.Sub(at).Seconds(), "completed/s")
		b.ReportMetric(float64(jobs)/lastDone.Sub(at).Seconds(), "steps-run/s")
		b.ReportMetric(walPerRun, "wal-records/run")
		b.ReportMetric(rowsPerRun, "rows-written/run")
		b.ReportMetric(ms(pgCPU)/float64(runs), "pg-cpu-ms/run")
		b.ReportMetric(ms(selfCPU)/float64(runs), "engine-cpu-ms/run")
	}
}

// BenchmarkTickCost measures one scheduler pass's database work over every
// shard (the per-shard earliest-fire probe) and one due-batch query: 64
// shards with 10,000 and with 1,000,000 job definitions in the table, and
// 256 shards with 10,000 (the cost per shard, for docs/scaling.md).
func BenchmarkTickCost(b *testing.B) {
	for _, v := range []struct{ jobs, shards int }{{10_000, 64}, {10_000, 256}, {1_000_000, 64}} {
		b.Run(fmt.Sprintf("jobs=%d,shards=%d", v.jobs, v.shards), func(b *testing.B) {
			pool := freshDB(b)
			if _, err := pool.Exec(context.Background(), "UPDATE cluster_settings SET shard_count = $1", v.shards); err != nil {
				b.Fatal(err)
			}
			future := time.Now().Add(24 * time.Hour)
			for off := 0; off < v.jobs; off += 100_000 {
				seedJobs(b, pool, fmt.Sprintf("tick%d", off), min(100_000, v.jobs-off), noopSpec("0 0 1 1 *"), future)
			}
			shards := make([]int32, v.shards)
			for i := range shards {
				shards[i] = int32(i)
			}
			q := store.New(pool)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				if _, err := q.ShardHeads(ctx, shards); err != nil {
					b.Fatal(err)
				}
				if _, err := q.DueJobs(ctx, store.DueJobsParams{Shards: shards, Batch: 500}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// printTableStats shows, with ORRERY_BENCH_STATS set, how many of each
// table's updates were HOT (no index entries written).
func printTableStats(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	if os.Getenv("ORRERY_BENCH_STATS") == "" {
		return
	}
	var records, fpi, bytes int64
	if err := pool.QueryRow(context.Background(), "SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").Scan(&records, &fpi, &bytes); err != nil {
		b.Fatalf("WAL statistics: %v", err)
	}
	fmt.Fprintf(os.Stderr, "WAL (whole cluster, since start): %d records, %d full-page images, %d MB\n", records, fpi, bytes>>20)
	rows, err := pool.Query(context.Background(), `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
		FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd > 0 ORDER BY relname`)
	if err != nil {
		b.Fatalf("table statistics: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var ins, upd, hot, del int64
		if err := rows.Scan(&name, &ins, &upd, &hot, &del); err != nil {
			b.Fatalf("table statistics: %v", err)
		}
		fmt.Fprintf(os.Stderr, "%-20s inserts %7d updates %7d (HOT %7d) deletes %7d\n", name, ins, upd, hot, del)
	}
	if err := rows.Err(); err != nil {
		b.Fatalf("table statistics: %v", err)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// rowWrites reads, per table of pool's database, the rows inserted,
// updated and deleted so far (pg_stat_user_tables; each backend flushes
// its counts within a second of its transactions, or when it could not,
// within ten). The jobs table is left out: a run's life never writes it,
// and the seeding's counts may still be arriving.
func rowWrites(b *testing.B, pool *pgxpool.Pool) map[string]int64 {
	b.Helper()
	rows, err := pool.Query(context.Background(), "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname <> 'jobs'")
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			b.Fatal(err)
		}
		out[name] = n
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// printRowWrites prints the rows written between two rowWrites per run of
// n, by table, and returns their sum per run.
func printRowWrites(before, after map[string]int64, n int) float64 {
	var total int64
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(after)) {
		if d := after[name] - before[name]; d > 0 {
			total += d
			parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(d)/float64(n)))
		}
	}
	fmt.Printf("bench: rows written per run: %s\n", strings.Join(parts, ", "))
	return float64(total) / float64(n)
}

// runSteps reads, for each run scheduled in [$1, $2), its instant (at)
// and the milliseconds from it to each step of its first attempt: the
// firing transaction's start (fired), the River job's insert (inserted),
// its fetch (fetched), the attempt's start (started).
const runSteps = `
	SELECT r.scheduled_for AS at,
	       extract(epoch FROM r.created_at - r.scheduled_for) * 1000 AS fired,
	       extract(epoch FROM j.created_at - r.scheduled_for) * 1000 AS inserted,
	       extract(epoch FROM j.attempted_at - r.scheduled_for) * 1000 AS fetched,
	       extract(epoch FROM a.started_at - r.scheduled_for) * 1000 AS started
	FROM runs r JOIN tasks t ON t.run_id = r.id JOIN attempts a ON a.task_id = t.id AND a.number = 1
	JOIN river_job j ON (j.args->>'task_id')::uuid = t.id AND (j.args->>'attempt')::int = 1
	WHERE r.scheduled_for >= $1 AND r.scheduled_for < $2`

// printPhases prints where the start lag of the runs scheduled in
// [from, until) went, as percentiles of each step's time since the
// scheduled instant: the firing transaction's start (the run's
// created_at), the River job's insert (after the admission pass), its
// fetch by a worker, and the attempt's start.
func printPhases(b *testing.B, pool *pgxpool.Pool, from, until time.Time) {
	b.Helper()
	var out string
	err := pool.QueryRow(context.Background(), `WITH p AS (`+runSteps+`)
		SELECT string_agg(format('%s p50 %s ms, p99 %s ms', k, round(p50::numeric), round(p99::numeric)), '; ')
		FROM (
			SELECT 'fired' AS k, 1 AS o, percentile_cont(0.5) WITHIN GROUP (ORDER BY fired) AS p50, percentile_cont(0.99) WITHIN GROUP (ORDER BY fired) AS p99 FROM p
			UNION ALL SELECT 'river insert', 2, percentile_cont(0.5) WITHIN GROUP (ORDER BY inserted), percentile_cont(0.99) WITHIN GROUP (ORDER BY inserted) FROM p
			UNION ALL SELECT 'fetched', 3, percentile_cont(0.5) WITHIN GROUP (ORDER BY fetched), percentile_cont(0.99) WITHIN GROUP (ORDER BY fetched) FROM p
			UNION ALL SELECT 'started', 4, percentile_cont(0.5) WITHIN GROUP (ORDER BY started), percentile_cont(0.99) WITHIN GROUP (ORDER BY started) FROM p
			ORDER BY o) AS s`, from, until).Scan(&out)
	if err != nil {
		b.Logf("phases: %v", err) // River may keep its jobs elsewhere (a queue database of its own)
		return
	}
	fmt.Printf("bench: since the instant: %s\n", out)
}

// printWorstInstants prints, for the scheduled instants in [from, until)
// whose last run started latest, each step's latest time since the
// instant (as printPhases) and how many runs were fetched more than 100 ms
// after it: whether a tail is spread over the window or one stall.
func printWorstInstants(b *testing.B, pool *pgxpool.Pool, from, until time.Time, n int) {
	b.Helper()
	rows, err := pool.Query(context.Background(), `WITH p AS (`+runSteps+`)
		SELECT format('%s: fired %s, inserted %s, fetched %s, started %s ms (max); %s fetched after 100 ms',
			to_char(at AT TIME ZONE 'UTC', 'HH24:MI:SS'), round(max(fired)::numeric), round(max(inserted)::numeric),
			round(max(fetched)::numeric), round(max(started)::numeric), count(*) FILTER (WHERE fetched > 100))
		FROM p GROUP BY at ORDER BY max(started) DESC LIMIT $3`, from, until, n)
	if err != nil {
		b.Logf("worst instants: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			b.Logf("worst instants: %v", err)
			return
		}
		fmt.Printf("bench: worst instant %s\n", line)
	}
}

// walDir is the benchmark cluster's WAL folder when ORRERY_BENCH_WALDUMP
// is set (which also keeps the segments from being recycled).
var walDir string

// walLSN is the cluster's current WAL position.
func walLSN(b *testing.B, pool *pgxpool.Pool) string {
	b.Helper()
	var lsn string
	if err := pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// printWALRecords prints, with ORRERY_BENCH_WALDUMP set, the WAL written
// between two positions (pg_waldump) per run of n: by record type, and the
// most frequent (type, relation) pairs, the relations named from pool's
// catalog: what a run's database work is made of (index entries, row
// locks, heap updates, and on which tables). The whole cluster's WAL: run
// the benchmark alone.
func printWALRecords(b *testing.B, pool *pgxpool.Pool, from, to string, n int) {
	b.Helper()
	if walDir == "" {
		return
	}
	bin, err := pgcluster.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	names := map[string]string{}
	rows, err := pool.Query(context.Background(), "SELECT relfilenode::text, relname FROM pg_class WHERE relfilenode <> 0")
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var node, name string
		if err := rows.Scan(&node, &name); err != nil {
			b.Fatal(err)
		}
		names[node] = name
	}
	rows.Close()
	out, err := exec.Command(filepath.Join(bin, "pg_waldump"), "--path", walDir, "--start", from, "--end", to).Output()
	if err != nil {
		b.Fatalf("pg_waldump: %v", err)
	}
	record := regexp.MustCompile(`^rmgr: (\S+)\s.*desc: (\S+)(?:.*?blkref #0: rel \d+/\d+/(\d+))?`)
	byType, byRel := map[string]int{}, map[string]int{}
	for _, line := range strings.Split(string(out), "\n") {
		m := record.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		typ := m[1] + "/" + m[2]
		byType[typ]++
		if m[3] != "" {
			rel := names[m[3]]
			if rel == "" {
				rel = "(" + m[3] + ")"
			}
			byRel[typ+" "+rel]++
		}
	}
	top := func(counts map[string]int, k int) []string {
		keys := slices.Collect(maps.Keys(counts))
		slices.SortFunc(keys, func(a, b string) int { return counts[b] - counts[a] })
		return keys[:min(k, len(keys))]
	}
	fmt.Printf("bench: WAL records a run (pg_waldump %s..%s), by type:\n", from, to)
	for _, k := range top(byType, 10) {
		fmt.Printf("  %-24s %6.2f\n", k, float64(byType[k])/float64(n))
	}
	fmt.Println("bench: and by type and relation:")
	for _, k := range top(byRel, 25) {
		fmt.Printf("  %-52s %6.2f\n", k, float64(byRel[k])/float64(n))
	}
}
