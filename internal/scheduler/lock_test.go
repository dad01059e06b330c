package scheduler_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/scheduler"
	"github.com/orrery-dev/orrery/internal/store"
)

// A definition change (here a pause) that comes while a firing holds the
// job's schedule row waits for the firing, and the two do not deadlock:
// the firing locks the schedule row and then checks its run's foreign key
// on the jobs row (FOR KEY SHARE), which the change holds FOR NO KEY
// UPDATE while it waits for the schedule row. The firing's run is
// written; the pause applies after it: no fire time left, and the job
// resumes from the instant after the one that fired. Under SERIALIZABLE
// (the test databases', CockroachDB's) the database may instead end the
// firing as a serialization failure once the two overlap; its retry then
// comes after the pause and finds nothing due. That order is as good: no
// run, and the job resumes from the instant the firing held. Either way
// nothing is fired twice or lost.
func TestPauseWhileFiringWaitsWithoutDeadlock(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	fp := failpoint.New()
	locked, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the node's own cleanup, which waits for the pass
	fp.At(scheduler.FailpointFireLocked, 1, func() { close(locked); <-release })
	j := createJob(t, pool, "paused-while-firing", everySecond("noop", dag.OverlapAllow))
	startPolicyNode(t, pool, node.Config{Failpoints: fp})
	select {
	case <-locked:
	case <-time.After(30 * time.Second):
		t.Fatal("no firing transaction within 30 s")
	}
	// The instant the held firing is firing (a read waits for no lock).
	var held time.Time
	if err := pool.QueryRow(ctx, "SELECT next_fire_at FROM job_schedules WHERE job_id = $1", j.ID).Scan(&held); err != nil {
		t.Fatal(err)
	}
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	paused := make(chan error, 1)
	go func() {
		_, err := jobs.Pause(ctx, job.Anonymous, job.Ref{ID: j.ID})
		paused <- err
	}()
	enginetest.WaitFor(t, 10*time.Second, "the pause waits for the firing's lock", func() bool {
		return enginetest.Int(t, pool, `SELECT count(*)::int FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	free()
	select {
	case err := <-paused:
		if err != nil {
			t.Fatalf("pause: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pause did not return within 30 s")
	}
	if n := enginetest.Int(t, pool, "SELECT count(*)::int FROM job_schedules WHERE job_id = $1 AND next_fire_at IS NULL", j.ID); n != 1 {
		t.Fatal("the paused job still has a fire time")
	}
	var runs []time.Time
	rows, err := pool.Query(ctx, "SELECT scheduled_for FROM runs WHERE job_id = $1", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, at)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var status string
	var resume time.Time
	if err := pool.QueryRow(ctx, "SELECT status, next_fire_at FROM jobs WHERE id = $1", j.ID).Scan(&status, &resume); err != nil {
		t.Fatal(err)
	}
	switch {
	case status != "paused":
		t.Fatalf("job status %q after the pause", status)
	case len(runs) == 1 && runs[0].Equal(held):
		t.Log("the firing committed first")
		if !resume.Equal(held.Add(time.Second)) {
			t.Fatalf("the paused job resumes from %v; want the instant after the fired %v", resume, held)
		}
	case len(runs) == 0:
		t.Log("the pause serialized first; the firing's retry found nothing due")
		if !resume.Equal(held) {
			t.Fatalf("the paused job resumes from %v; want the unfired instant %v", resume, held)
		}
	default:
		t.Fatalf("runs for %v; want the held firing's instant %v, or none", runs, held)
	}
}

// A firing that waits for a definition change holding the job's schedule
// row runs the definition that change committed, under READ COMMITTED
// (PostgreSQL's default, where a lock that waited rechecks only the row it
// locks) as under SERIALIZABLE.
func TestFiringAfterADefinitionChangeRunsIt(t *testing.T) {
	t.Parallel()
	for _, iso := range []string{"read committed", "serializable"} {
		t.Run(strings.ReplaceAll(iso, " ", "_"), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = iso
			cfg.AfterConnect = store.RegisterTypes
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			j := createJob(t, pool, "changed-while-due", everySecond("noop", dag.OverlapAllow))
			// The change, held open: the jobs row, then the schedule row (as
			// job.Lock takes them), and a new version of the definition.
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			for _, sql := range []string{
				"SELECT 1 FROM jobs WHERE id = $1 FOR NO KEY UPDATE",
				"SELECT 1 FROM job_schedules WHERE job_id = $1 FOR UPDATE",
				`UPDATE jobs SET version = 2, description = 'v2', spec = jsonb_set(spec, '{run,handler}', '"v2"') WHERE id = $1`,
				`INSERT INTO job_versions (job_id, version, tenant_id, description, labels, spec, created_at, created_by)
				 SELECT id, 2, tenant_id, description, labels, spec, now(), 'test' FROM jobs WHERE id = $1`,
			} {
				if _, err := tx.Exec(ctx, sql, j.ID); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			var changer int
			if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&changer); err != nil {
				t.Fatal(err)
			}
			startPolicyNode(t, pool, node.Config{})
			enginetest.WaitFor(t, 10*time.Second, "a firing waits for the change's lock", func() bool {
				return enginetest.Int(t, pool, `SELECT count(*)::int FROM pg_stat_activity
					WHERE datname = current_database() AND $1::int = ANY(pg_blocking_pids(pid))`, changer) > 0
			})
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			enginetest.WaitFor(t, 10*time.Second, "the job fires", func() bool {
				return enginetest.Int(t, pool, "SELECT count(*)::int FROM runs WHERE job_id = $1", j.ID) > 0
			})
			if v := enginetest.Int(t, pool, "SELECT min(job_version)::int FROM runs WHERE job_id = $1", j.ID); v != 2 {
				t.Fatalf("the first run is of version %d, want 2 (the definition committed before the firing took its lock)", v)
			}
		})
	}
}
