package retention_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/retention"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/shard"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// manager holds every shard (the only node), until the test ends.
func manager(t *testing.T, pool *pgxpool.Pool) *shard.Manager {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m, err := shard.NewManager(ctx, pool, shard.Config{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	enginetest.WaitFor(t, 10*time.Second, "every shard held", func() bool { return len(m.Leases()) == shard.DefaultCount })
	return m
}

// finishedRun makes a run of the job (two tasks, an edge, an attempt)
// that finished with status, age ago.
func finishedRun(t *testing.T, pool *pgxpool.Pool, runs *run.Service, name, status string, age time.Duration) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	r, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "ops", Name: name}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	taskStatus := "succeeded"
	if status == "dead_lettered" {
		taskStatus = "dead_lettered"
	}
	for _, sql := range []string{
		`UPDATE tasks SET status = $2, finished_at = now() - $3::interval WHERE run_id = $1`,
		`INSERT INTO attempts (id, task_id, tenant_id, number, fencing_token, worker, started_at, finished_at, outcome)
		 SELECT gen_random_uuid(), id, tenant_id, 1, 1, 'w', now() - $3::interval, now() - $3::interval, 'succeeded' FROM tasks WHERE run_id = $1 AND $2 <> ''`,
		`UPDATE runs SET status = CASE WHEN $2 = 'dead_lettered' THEN 'failed' ELSE 'succeeded' END, finished_at = now() - $3::interval WHERE id = $1`,
	} {
		if _, err := pool.Exec(ctx, sql, r.ID, taskStatus, fmt.Sprintf("%d seconds", int(age.Seconds()))); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	return r.ID
}

func exists(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) bool {
	return enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE id = $1", id) == 1
}

// Finished runs older than the retention go, with their tasks, edges and
// attempts, after being archived; dead-lettered, recent and unfinished
// runs stay; a tenant's own retention applies to its runs; a janitor that
// holds no shard prunes nothing.
func TestOldRunsArePrunedAndArchived(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	runs := run.NewService(pool, jobs, d)
	steps := []dag.Step{{Name: "a", Run: dag.Executor{Handler: "h"}}, {Name: "b", Needs: []string{"a"}, Run: dag.Executor{Handler: "h"}}}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "etl", Namespace: "ops"},
		Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@daily")}, Overlap: "allow", Steps: steps}}, ""); err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	old1 := finishedRun(t, pool, runs, "etl", "succeeded", 8*day)
	old2 := finishedRun(t, pool, runs, "etl", "succeeded", 9*day)
	dead := finishedRun(t, pool, runs, "etl", "dead_lettered", 10*day)
	recent := finishedRun(t, pool, runs, "etl", "succeeded", 2*time.Hour)
	mid := finishedRun(t, pool, runs, "etl", "succeeded", 4*day)
	open, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "ops", Name: "etl"}, "", true)
	if err != nil {
		t.Fatal(err)
	}

	// Holding no shard: nothing goes.
	idle, err := shard.NewManager(ctx, pool, shard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := retention.New(retention.Config{Pool: pool, Shards: idle})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := j.Pass(ctx); err != nil || n != 0 {
		t.Fatalf("a janitor without shards pruned %d (%v)", n, err)
	}

	// Backfills: one that ended 8 days ago goes, one running and one that
	// ended an hour ago stay.
	for _, b := range []struct {
		status string
		ago    time.Duration // since its end (0: running)
	}{{"done", 8 * day}, {"running", 0}, {"cancelled", time.Hour}} {
		var finished *time.Time
		if b.ago > 0 {
			at := time.Now().Add(-b.ago)
			finished = &at
		}
		if _, err := pool.Exec(ctx, `INSERT INTO backfills (id, tenant_id, job_id, shard, from_at, to_at, redo, max_concurrent, newest_first, total, status, created_at, created_by, finished_at)
			SELECT $1, tenant_id, id, shard, now() - interval '2 days', now() - interval '1 day', 'none', 1, false, 1, $2, now() - interval '9 days', 'test', $3
			FROM jobs WHERE name = 'etl'`, uuid.New(), b.status, finished); err != nil {
			t.Fatal(err)
		}
	}

	// Events are kept as long as their tenant keeps runs: one received 8
	// days ago goes, ones of 4 days and 2 hours stay (until the tenant's
	// retention below); a run's event goes to the archive with it.
	for i, ago := range []time.Duration{8 * day, 4 * day, 2 * time.Hour} {
		if _, err := pool.Exec(ctx, `INSERT INTO events (id, tenant_id, event_key, type, data, time, received_at, shard, pending)
			VALUES ($1, $2, $3, 'order.paid', '{}', now(), now() - $4 * interval '1 second', 0, false)`, uuid.New(), job.DefaultTenant, fmt.Sprint("e", i), ago.Seconds()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE runs SET event = '{"id": "e0", "type": "order.paid", "data": {"order": 7}}' WHERE id = $1`, old1); err != nil {
		t.Fatal(err)
	}
	// One received 8 days ago whose run is still open stays: its id stays
	// taken while the run may be waiting (an approval, a wait).
	held := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO events (id, tenant_id, event_key, type, data, time, received_at, shard, pending)
		VALUES ($1, $2, 'held', 'order.paid', '{}', now(), now() - interval '8 days', 0, false)`, held, job.DefaultTenant); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE runs SET event_id = $1 WHERE id = $2`, held, open.ID); err != nil {
		t.Fatal(err)
	}
	events := func() int { return enginetest.Int(t, pool, "SELECT count(*) FROM events") }

	archive := t.TempDir()
	j, err = retention.New(retention.Config{Pool: pool, Shards: manager(t, pool), ArchiveDir: archive, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	n, err := j.Pass(ctx)
	if err != nil || n != 2 {
		t.Fatalf("pruned %d (%v), want 2", n, err)
	}
	if n := events(); n != 3 {
		t.Errorf("%d events left, want those of 4 days and 2 hours, and the open run's", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM backfills WHERE status = 'done'"); n != 0 {
		t.Errorf("%d backfills that ended 8 days ago left", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM backfills"); n != 2 {
		t.Errorf("%d backfills left, want the running one and the recent one", n)
	}
	for id, want := range map[uuid.UUID]bool{old1: false, old2: false, dead: true, recent: true, mid: true, open.ID: true} {
		if got := exists(t, pool, id); got != want {
			t.Errorf("run %s exists: %t, want %t", id, got, want)
		}
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM tasks WHERE run_id = ANY($1)", []uuid.UUID{old1, old2}); n != 0 {
		t.Errorf("%d tasks of pruned runs remain", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.run_id = $1", recent); n != 2 {
		t.Errorf("the recent run lost attempts: %d", n)
	}
	// What the tenant holds (its storage quotas) lost what was pruned.
	for what, query := range map[string][2]string{
		"runs":  {"SELECT sum(runs)::int FROM tenant_run_usage", "SELECT count(*) FROM runs"},
		"tasks": {"SELECT sum(tasks)::int FROM tenant_run_usage", "SELECT count(*) FROM tasks"},
	} {
		if counted, held := enginetest.Int(t, pool, query[0]), enginetest.Int(t, pool, query[1]); counted != held {
			t.Errorf("tenant_run_usage counts %d %s, the database holds %d", counted, what, held)
		}
	}

	// The archive holds both, with their tasks and attempts.
	files, _ := filepath.Glob(filepath.Join(archive, job.DefaultTenant.String(), "runs-*.jsonl.gz"))
	seen := map[string]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(fh)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(zr)
		for sc.Scan() {
			var a struct {
				Run struct {
					ID    string
					Event struct{ ID string }
				}
				Tasks []struct {
					Step     string
					Attempts []struct{ Number int }
				}
			}
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				t.Fatal(err)
			}
			if len(a.Tasks) == 2 && len(a.Tasks[0].Attempts) == 1 {
				seen[a.Run.ID]++
			}
			if a.Run.ID == old1.String() && a.Run.Event.ID != "e0" {
				t.Errorf("the archived run's event: %s", sc.Bytes())
			}
		}
		fh.Close()
	}
	if len(files) != 2 || seen[old1.String()] != 1 || seen[old2.String()] != 1 {
		t.Errorf("archive: %d files, runs %v", len(files), seen)
	}

	// A tenant that keeps runs 3 days loses the 4-day-old one; one that
	// asks for an hour still keeps 3 days (the floor).
	if _, err := pool.Exec(ctx, "UPDATE tenants SET run_retention_seconds = 3600 WHERE id = $1", job.DefaultTenant); err != nil {
		t.Fatal(err)
	}
	if n, err := j.Pass(ctx); err != nil || n != 1 || exists(t, pool, mid) || !exists(t, pool, recent) {
		t.Fatalf("with a 1-hour tenant retention (floored at 3 days): pruned %d (%v)", n, err)
	}
	if n := events(); n != 2 {
		t.Errorf("with a 3-day retention, %d events left, want the one of 2 hours and the open run's", n)
	}
}

// Firing goes on while a node's janitor prunes thousands of old runs (its
// first pass, at start): a job due every second gets a run for every
// second of it.
func TestFiringContinuesWhilePruning(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"old", "tick"} {
		cron := "@yearly"
		if name == "tick" {
			cron = "* * * * * *"
		}
		// overlap: allow, so that every instant gets a run though no worker
		// runs them.
		if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name, Namespace: "ops"},
			Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons(cron)}, Overlap: "allow", Run: &dag.Executor{Handler: "h"}}}, ""); err != nil {
			t.Fatal(err)
		}
	}
	const old = 10_000
	if _, err := pool.Exec(ctx, `INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at, finished_at)
		SELECT gen_random_uuid(), j.tenant_id, j.id, 1, j.shard, now() - interval '30 days' - i * interval '1 minute', 'schedule', 'succeeded',
		       now() - interval '30 days', now() - interval '30 days'
		FROM jobs AS j, generate_series(1, $1::int) AS i WHERE j.name = 'old'`, old); err != nil {
		t.Fatal(err)
	}
	count := func(name string) int {
		return enginetest.Int(t, pool, "SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = $1", name)
	}
	enginetest.StartNode(t, pool)
	began := time.Now()
	enginetest.WaitFor(t, 60*time.Second, "the old runs pruned", func() bool { return count("old") == 0 })
	elapsed := time.Since(began)
	time.Sleep(1500 * time.Millisecond) // the last instants of the window fire
	// Every second from tick's first instant to the end of pruning has
	// its run: no instant was skipped or late enough to be missed.
	var first, last time.Time
	var distinct int
	if err := pool.QueryRow(ctx, `SELECT min(r.scheduled_for), max(r.scheduled_for), count(DISTINCT r.scheduled_for)
		FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'tick' AND r.status <> 'skipped'`).Scan(&first, &last, &distinct); err != nil {
		t.Fatal(err)
	}
	want := int(last.Sub(first)/time.Second) + 1
	if distinct != want || last.Sub(first) < elapsed-2*time.Second {
		t.Fatalf("tick: %d runs from %s to %s, want %d (pruning took %s)", distinct, first, last, want, elapsed)
	}
	t.Logf("pruned %d runs in %s; tick fired every second meanwhile (%d runs)", old, elapsed.Round(time.Millisecond), distinct)
}
