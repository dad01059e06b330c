package main_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/store"
)

// No worker runs, at once, attempts asking for more than its capacity,
// nor a tenant more than its quota in resources:
// two worker processes of different sizes share a queue whose steps ask
// for 750m (and some for 2 cores, which only the larger one has); by the
// attempts table, what each worker ran at once never passed its capacity
// in any resource, the 2-core steps ran on the larger one only, and every
// run succeeds.
func TestNoWorkerIsOvercommitted(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	ctx := context.Background()
	startNodeProc(t, dsn, "node")
	for _, w := range []struct{ name, capacity string }{{"small", "cpu=1,memory=2Gi"}, {"large", "cpu=4,memory=8Gi"}} {
		startProc(t, w.name, "worker", "--db", dsn, "--queue", "default=8", "--name", w.name, "--capacity", w.capacity,
			"--lease-ttl", "2s", "--allow-command", "/bin/*", "--allow-command", "/usr/bin/python3", "--sandbox", "off", "--log-level", "info")
	}
	// The tenant's quota in resources: its tasks in flight, in every
	// queue, ask for 4 cores at most together (the workers have 5).
	if _, err := pool.Exec(ctx, `UPDATE tenants SET max_resources = '{"cpu": 4000}' WHERE id = $1`, job.DefaultTenant); err != nil {
		t.Fatal(err)
	}
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := dag.JobSpec{
		Schedule: schedule.Spec{At: "2099-01-01T00:00:00Z"},
		Overlap:  dag.OverlapAllow,
		Defaults: dag.StepDefaults{Resources: &dag.Resources{CPU: "750m", Memory: "512Mi"}},
	}
	for i := range 10 {
		st := dag.Step{Name: fmt.Sprintf("s%d", i), Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/sleep", "0.3"}}}}
		if i%3 == 0 {
			st.Resources = &dag.Resources{CPU: "2", Memory: "1Gi"}
		}
		spec.Steps = append(spec.Steps, st)
	}
	j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "packed"}, Spec: spec}, "")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := fireNow(ctx, pool, j.ID); err != nil {
			t.Fatal(err)
		}
		poll(t, 30*time.Second, "the run is created", func() bool {
			return queryInt(t, pool, "SELECT count(*) FROM job_schedules WHERE job_id = $1 AND next_fire_at IS NULL", j.ID) == 1
		})
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rows, _ := pool.Query(context.Background(), `SELECT k.step || ' ' || k.status || ' ' || k.res_cpu || ' ' || coalesce(k.admitted_at::text, '-') || ' ' ||
			coalesce((SELECT string_agg(j.state || '/' || j.queue || '/' || coalesce(j.attempted_by[array_length(j.attempted_by, 1)], '-'), ',') FROM river_job j WHERE (j.args->>'task_id')::uuid = k.id), '')
			FROM tasks k ORDER BY k.created_at`)
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			t.Log(s)
		}
		rows.Close()
	})
	// A step past the memory it asks for is killed (exit reason
	// resources), and the worker goes on.
	hog := dag.JobSpec{Schedule: schedule.Spec{At: "2099-01-01T00:00:00Z"},
		Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}, Resources: &dag.Resources{CPU: "100m", Memory: "64Mi"}},
		Run:      &dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/usr/bin/python3", "-c", `b = b"a" * (256 << 20)`}}}}
	h, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "hog"}, Spec: hog}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := fireNow(ctx, pool, h.ID); err != nil {
		t.Fatal(err)
	}
	poll(t, 90*time.Second, "every run succeeds, and the hog's fails", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE status = 'succeeded'") == 3 &&
			queryInt(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'hog' AND r.status = 'failed'") == 1
	})
	if n := queryInt(t, pool, `SELECT count(*) FROM attempts a JOIN tasks k ON k.id = a.task_id JOIN runs r ON r.id = k.run_id JOIN jobs j ON j.id = r.job_id
		WHERE j.name = 'hog' AND a.exit_reason = 'resources' AND a.error LIKE 'it passed the memory it asked for (resources.memory 64 MiB)%'`); n != 1 {
		t.Errorf("%d of the hog's attempts ended with exit reason resources, want 1", n)
	}
	checkNoOvercommit(t, pool, map[string]resources.Vector{"small": {CPU: 1000, Memory: 2 << 30}, "large": {CPU: 4000, Memory: 8 << 30}})
	// Each says how it holds its command steps (the cluster page shows it):
	// by cgroup, memory at least, as the hog's end shows.
	if n := queryInt(t, pool, `SELECT count(*) FROM workers WHERE name IN ('small', 'large') AND enforces IN ('memory, cpu', 'memory')`); n != 2 {
		t.Errorf("%d workers say they enforce memory by cgroup, want 2", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM attempts a JOIN tasks k ON k.id = a.task_id WHERE k.res_cpu = 2000 AND a.worker <> 'large'`); n != 0 {
		t.Errorf("%d attempts of 2 cores ran on the 1-core worker", n)
	}
	if n := queryInt(t, pool, `SELECT count(DISTINCT worker) FROM attempts`); n != 2 {
		t.Errorf("attempts ran on %d workers, want both", n)
	}
	// The tenant as one worker of its quota's size: never past it at once.
	if _, err := pool.Exec(ctx, `UPDATE attempts SET worker = 'the tenant'`); err != nil {
		t.Fatal(err)
	}
	checkNoOvercommit(t, pool, map[string]resources.Vector{"the tenant": {CPU: 4000, Memory: 1 << 40}})
}

// checkNoOvercommit fails t if, by the attempts table, a worker ran at
// once attempts whose tasks ask for more than its capacity (an attempt
// holds its room from its start to its end, or for ever when it has none
// yet: a killed worker's until the reaper ends it).
func checkNoOvercommit(t *testing.T, pool *pgxpool.Pool, capacity map[string]resources.Vector) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT a.worker, a.started_at, COALESCE(a.finished_at, '9999-12-31'::timestamptz),
		k.res_cpu, k.res_memory, k.res_gpu FROM every_attempt a JOIN tasks k ON k.id = a.task_id WHERE a.worker = ANY($1)`, slices.Collect(maps.Keys(capacity)))
	if err != nil {
		t.Fatal(err)
	}
	type event struct {
		at    time.Time
		delta resources.Vector
	}
	byWorker := map[string][]event{}
	for rows.Next() {
		var w string
		var from, to time.Time
		var v resources.Vector
		if err := rows.Scan(&w, &from, &to, &v.CPU, &v.Memory, &v.GPU); err != nil {
			t.Fatal(err)
		}
		byWorker[w] = append(byWorker[w], event{from, v}, event{to, resources.Vector{}.Sub(v)})
	}
	rows.Close()
	for w, events := range byWorker {
		// Ends before starts at one instant: [start, end) intervals.
		slices.SortFunc(events, func(a, b event) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return cmp.Compare(a.delta.CPU+a.delta.Memory, b.delta.CPU+b.delta.Memory)
		})
		var now, most resources.Vector
		for _, e := range events {
			now = now.Add(e.delta)
			most = resources.Vector{CPU: max(most.CPU, now.CPU), Memory: max(most.Memory, now.Memory), GPU: max(most.GPU, now.GPU)}
		}
		t.Logf("%s ran at most %s at once (capacity %s), %d attempts", w, most, capacity[w], len(events)/2)
		if !most.FitsIn(capacity[w]) {
			t.Errorf("%s was overcommitted: %s at once, capacity %s", w, most, capacity[w])
		}
	}
}

// A task needing the whole worker, behind a steady stream of another
// tenant's small tasks that keeps the queue full, starts (no starvation):
// once it has waited 10 s admission holds back the room it needs, and the
// worker's gate then holds its room from the start (nothing passes it
// there). The stream keeps arriving, and runs, throughout.
func TestABigTaskStartsBehindAStreamOfSmallOnes(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	ctx := context.Background()
	startNodeProc(t, dsn, "node")
	startProc(t, "worker", "worker", "--db", dsn, "--queue", "default=8", "--name", "w", "--capacity", "cpu=2,memory=4Gi",
		"--allow-command", "/bin/*", "--sandbox", "off")
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := job.Actor{Tenant: uuid.New(), Name: "big"}
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, name) VALUES ($1, 'big')`, other.Tenant); err != nil {
		t.Fatal(err)
	}
	sleep := func(s string) dag.Executor {
		return dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/sleep", s}}}
	}
	// Eight quarter-core steps of about a second, twice a second: 4 cores asked
	// of a 2-core worker, so the queue never drains, and its room frees a
	// quarter core at a time.
	stream := dag.JobSpec{Schedule: schedule.Spec{At: "2099-01-01T00:00:00Z"}, Overlap: dag.OverlapAllow,
		Defaults: dag.StepDefaults{Resources: &dag.Resources{CPU: "250m", Memory: "16Mi"}}}
	for i := range 8 {
		// Of different lengths, so that they end one by one.
		stream.Steps = append(stream.Steps, dag.Step{Name: fmt.Sprintf("s%d", i), Run: sleep(fmt.Sprintf("%.2f", 0.6+0.1*float64(i)))})
	}
	s, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "stream"}, Spec: stream}, "")
	if err != nil {
		t.Fatal(err)
	}
	big := dag.JobSpec{Schedule: schedule.Spec{At: "2099-01-01T00:00:00Z"},
		Steps: []dag.Step{{Name: "whole", Run: sleep("0.1"), Resources: &dag.Resources{CPU: "2", Memory: "64Mi"}}}}
	b, err := jobs.Create(ctx, other, dag.Resource{Metadata: dag.Metadata{Name: "whole-worker"}, Spec: big}, "")
	if err != nil {
		t.Fatal(err)
	}
	fire := func(id uuid.UUID) {
		if err := fireNow(ctx, pool, id); err != nil {
			t.Error(err)
		}
	}
	streaming, done := context.WithCancel(ctx)
	defer done()
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for streaming.Err() == nil {
			fire(s.ID)
			select {
			case <-streaming.Done():
			case <-tick.C:
			}
		}
	}()
	poll(t, 60*time.Second, "the stream fills the queue", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM tasks WHERE admitted_at IS NULL AND status = 'queued'") >= 10
	})
	fire(b.ID)
	poll(t, 120*time.Second, "the big task starts", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM tasks WHERE step = 'whole' AND attempt_started_at IS NOT NULL") == 1
	})
	// Read once it may have ended: its start stays in its task's row, its
	// admission in its River job's creation (admitted_at is cleared at its
	// end).
	var waited, admitted float64
	var during int
	if err := pool.QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM k.attempt_started_at - k.created_at),
		EXTRACT(EPOCH FROM (SELECT min(j.created_at) FROM river_job j WHERE j.args->>'task_id' = k.id::text) - k.created_at),
		(SELECT count(*) FROM every_attempt x JOIN tasks y ON y.id = x.task_id WHERE y.step <> 'whole' AND x.started_at BETWEEN k.created_at AND k.attempt_started_at)
		FROM tasks k WHERE k.step = 'whole'`).Scan(&waited, &admitted, &during); err != nil {
		t.Fatal(err)
	}
	t.Logf("the big task was admitted %.1f s and started %.1f s after it was released; %d small attempts started meanwhile", admitted, waited, during)
	if during == 0 {
		t.Error("no small attempt started while the big task waited: the stream did not run beside it")
	}
	done()
	checkNoOvercommit(t, pool, map[string]resources.Vector{"w": {CPU: 2000, Memory: 4 << 30}})
}

// A worker SIGKILLed while its attempts hold its room: its lease lapses,
// the reaper ends what it ran and its fetched jobs are redelivered, so the
// room those attempts held comes back, and a new worker of the same size
// runs them; no worker ran more than it has at once.
func TestAKilledWorkersRoomComesBack(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	ctx := context.Background()
	startNodeProc(t, dsn, "node")
	worker := func(name string) *proc {
		return startProc(t, name, "worker", "--db", dsn, "--queue", "default=2", "--name", name, "--capacity", "cpu=1,memory=1Gi",
			"--lease-ttl", "2s", "--allow-command", "/bin/*", "--sandbox", "off")
	}
	w1 := worker("w1")
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := dag.JobSpec{Schedule: schedule.Spec{At: "2099-01-01T00:00:00Z"},
		Defaults: dag.StepDefaults{Resources: &dag.Resources{CPU: "1", Memory: "64Mi"}, Retry: &dag.Retry{MaxAttempts: 2}}}
	for _, name := range []string{"a", "b", "c"} {
		spec.Steps = append(spec.Steps, dag.Step{Name: name, Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/sleep", "3"}}}})
	}
	j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "whole-cores"}, Spec: spec}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := fireNow(ctx, pool, j.ID); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "w1 runs a step", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM every_attempt WHERE worker = 'w1' AND finished_at IS NULL") == 1
	})
	w1.signal(t, syscall.SIGKILL)
	worker("w2")
	// The room w1's attempt held comes back when the reaper ends it.
	took := poll(t, 60*time.Second, "w1's attempt is ended", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM attempts WHERE worker = 'w1' AND finished_at IS NOT NULL") == 1
	})
	t.Logf("w1's attempt was ended, its room free, %.1f s after w1 was killed (lease TTL 2 s)", took.Seconds())
	poll(t, 90*time.Second, "the run succeeds", func() bool {
		return queryInt(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1 AND status = 'succeeded'", j.ID) == 1
	})
	if n := queryInt(t, pool, "SELECT count(*) FROM attempts WHERE worker = 'w1' AND exit_reason = 'lease_expired'"); n != 1 {
		t.Errorf("%d of w1's attempts ended lease_expired, want its one", n)
	}
	if n := queryInt(t, pool, "SELECT count(DISTINCT k.step) FROM attempts a JOIN tasks k ON k.id = a.task_id WHERE a.worker = 'w2' AND a.outcome = 'succeeded'"); n != 3 {
		t.Errorf("w2 ran %d of the 3 steps to success, want all (w1's among them)", n)
	}
	checkNoOvercommit(t, pool, map[string]resources.Vector{"w1": {CPU: 1000, Memory: 1 << 30}, "w2": {CPU: 1000, Memory: 1 << 30}})
}

// fireNow makes a job due now. The scheduler writes the same row as it
// fires: under SERIALIZABLE (the tests' isolation) the write is retried,
// as the engine's own are.
func fireNow(ctx context.Context, pool *pgxpool.Pool, job uuid.UUID) error {
	return store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE job_schedules SET next_fire_at = now() WHERE job_id = $1", job)
		return err
	})
}
