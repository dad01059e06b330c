package scheduler_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// A backfill fires each instant of the range once (by the job's zone and
// exclusions), newest first, never more than max_concurrent at once; a
// second identical one creates nothing; a dry run writes nothing; redo
// failed retries the failed runs in place.
func TestBackfillFiresEachInstantOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var inflight, most atomic.Int64
	var failing atomic.Bool
	failing.Store(true)
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{"work": func(ctx context.Context, c executor.Call) error {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(50 * time.Millisecond)
		// The instant of 4 October fails while failing is set.
		if failing.Load() && c.ScheduledFor.Day() == 4 {
			return executor.Permanent(errors.New("boom"))
		}
		return nil
	}})
	startPolicyNode(t, pool, node.Config{})
	spec := dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("0 9 * * *"), Timezone: "Europe/Berlin", Exclude: &schedule.Exclude{Dates: []string{"2026-10-10"}}},
		Overlap:  dag.OverlapSkip, Run: &dag.Executor{Handler: "work"}, Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}},
	}
	j := createJob(t, pool, "daily", spec)
	_, _, runs := services(t, pool)
	ref := job.Ref{Namespace: "default", Name: "daily"}
	from, to := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 20, 7, 0, 0, 0, time.UTC)
	sched, err := schedule.Parse(spec.Schedule)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := sched.Between(from, to, 100) // 9:00 Berlin (7:00Z in summer time) from 1 to 20 October but the 10th
	if len(want) != 19 {
		t.Fatalf("the range holds %d instants, want 19", len(want))
	}

	dry, err := runs.Backfill(ctx, job.Anonymous, ref, run.BackfillOptions{From: from, To: to, NewestFirst: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Total != 19 || len(dry.Instants) != 19 || !dry.Instants[0].Equal(want[18]) || enginetest.Int(t, pool, "SELECT count(*) FROM backfills") != 0 {
		t.Fatalf("dry run: total %d, instants %v; want 19, newest first, nothing written", dry.Total, dry.Instants)
	}

	b, err := runs.Backfill(ctx, job.Anonymous, ref, run.BackfillOptions{From: from, To: to, MaxConcurrent: 3, NewestFirst: true})
	if err != nil {
		t.Fatal(err)
	}
	done := func(id any) bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM backfills WHERE id = $1 AND status = 'done'", id) == 1 &&
			enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1 AND finished_at IS NULL", j.ID) == 0
	}
	enginetest.WaitFor(t, 60*time.Second, "the backfill done and its runs ended", func() bool { return done(b.ID) })
	got := instantsOf(t, pool, "SELECT scheduled_for FROM runs WHERE job_id = $1 AND trigger = 'backfill' ORDER BY scheduled_for", j.ID)
	if !slices.EqualFunc(got, want, func(a, b time.Time) bool { return a.Equal(b) }) {
		t.Fatalf("backfilled instants %v, want %v", got, want)
	}
	// Each run names its backfill, which keeps it out of the overlap
	// policy's active runs (the job's overlap is skip: its live instants
	// fire beside a backfill).
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1 AND backfill_id = $2", j.ID, b.ID); n != 19 {
		t.Errorf("%d runs name the backfill, want 19", n)
	}
	if m := most.Load(); m > 3 {
		t.Errorf("%d runs of the backfill at once, max_concurrent 3", m)
	}
	if first := instantsOf(t, pool, "SELECT scheduled_for FROM runs WHERE job_id = $1 ORDER BY created_at, scheduled_for DESC LIMIT 1", j.ID); !first[0].Equal(want[18]) {
		t.Errorf("first run written for %s, want the newest instant %s", first[0], want[18])
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'backfill' AND target_id = $1", j.ID); n != 1 {
		t.Errorf("%d backfill audit rows, want 1", n)
	}

	// Again: nothing new; with redo failed, the failed instant's run is
	// retried in place, and succeeds.
	again, err := runs.Backfill(ctx, job.Anonymous, ref, run.BackfillOptions{From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "the second backfill done", func() bool { return done(again.ID) })
	failing.Store(false)
	redo, err := runs.Backfill(ctx, job.Anonymous, ref, run.BackfillOptions{From: from, To: to, Redo: run.RedoFailed})
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "the redo backfill done", func() bool { return done(redo.ID) })
	list, err := runs.ListBackfills(ctx, job.Anonymous, ref)
	if err != nil || len(list) != 3 {
		t.Fatalf("list: %d, %v", len(list), err)
	}
	r, a, f := list[2], list[1], list[0] // newest first
	if r.Created != 19 || a.Created != 0 || a.Existing != 19 || f.Retried != 1 || f.Existing != 18 {
		t.Errorf("created %d; again created %d, left %d; redo retried %d, left %d", r.Created, a.Created, a.Existing, f.Retried, f.Existing)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1", j.ID); n != 19 {
		t.Errorf("%d runs, want 19: one per instant", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1 AND status = 'succeeded'", j.ID); n != 19 {
		t.Errorf("%d runs succeeded, want 19 after the redo", n)
	}
}

// Redo all runs every instant of the range again from the start: a run
// that succeeded, each of its steps and fan-out items; an instant the
// scheduler recorded skipped (a record without tasks) gets a run of the
// backfill in its place, which redo none leaves alone.
func TestBackfillRedoAllRunsEveryInstantAgain(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var calls sync.Map // step (an item counted as its step) -> *atomic.Int64
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{"work": func(ctx context.Context, c executor.Call) error {
		step, _, _ := dag.StepOfItem(c.Step)
		n, _ := calls.LoadOrStore(step, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		return nil
	}})
	startPolicyNode(t, pool, node.Config{})
	spec := dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("0 * * * *")}, Overlap: dag.OverlapSkip,
		Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}},
		Steps: []dag.Step{
			{Name: "a", Run: dag.Executor{Handler: "work"}},
			{Name: "load", Needs: []string{"a"}, ForEach: "${{ [1, 2, 3] }}", Run: dag.Executor{Handler: "work"}},
			{Name: "b", Needs: []string{"load"}, Run: dag.Executor{Handler: "work"}},
		},
	}
	j := createJob(t, pool, "hourly", spec)
	jobs, d, runs := services(t, pool)
	ref := job.Ref{Namespace: "default", Name: "hourly"}
	from, to := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 1, 4, 0, 0, 0, time.UTC)
	// 1:00 and 2:00 were skipped by the schedule: records, no tasks (two,
	// so that one step deletes both).
	got, err := jobs.Get(ctx, job.Anonymous, ref)
	if err != nil {
		t.Fatal(err)
	}
	var skipped []run.New
	for _, h := range []time.Duration{time.Hour, 2 * time.Hour} {
		skipped = append(skipped, run.New{Job: run.JobRef{ID: got.ID, Tenant: got.Tenant, Version: got.Version, Shard: got.Shard, Spec: &got.Spec},
			At: from.Add(h), Trigger: lifecycle.TriggerSchedule, Status: lifecycle.RunSkipped, Reason: "misfire: skip"})
	}
	if err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := (&run.Applier{Dispatcher: d}).Insert(ctx, tx, skipped, nil, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	done := func(id any) bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM backfills WHERE id = $1 AND status = 'done'", id) == 1 &&
			enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1 AND finished_at IS NULL", j.ID) == 0
	}
	first, err := runs.Backfill(ctx, job.Anonymous, ref, run.BackfillOptions{From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 60*time.Second, "the first backfill done", func() bool { return done(first.ID) })
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1 AND status = 'skipped'", j.ID); n != 2 {
		t.Fatalf("redo none: %d skipped runs, want the 2 records left alone", n)
	}
	all, err := runs.Backfill(ctx, job.Anonymous, ref, run.BackfillOptions{From: from, To: to, Redo: run.RedoAll, MaxConcurrent: 3})
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 60*time.Second, "the redo all backfill done", func() bool { return done(all.ID) })
	list, err := runs.ListBackfills(ctx, job.Anonymous, ref)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %d, %v", len(list), err)
	}
	if f, a := list[1], list[0]; f.Created != 3 || f.Existing != 2 || a.Created != 2 || a.Retried != 3 || a.Existing != 0 {
		t.Errorf("first: created %d, left %d (want 3, 2); redo all: created %d, ran again %d, left %d (want 2, 3, 0)",
			f.Created, f.Existing, a.Created, a.Retried, a.Existing)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1 AND status = 'succeeded'", j.ID); n != 5 {
		t.Errorf("%d runs succeeded, want 5: one per instant", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE job_id = $1", j.ID); n != 5 {
		t.Errorf("%d runs, want 5", n)
	}
	// 3 instants twice and the records' once: a and b 8 times, 24 items.
	for step, want := range map[string]int64{"a": 8, "load": 24, "b": 8} {
		var n int64
		if v, ok := calls.Load(step); ok {
			n = v.(*atomic.Int64).Load()
		}
		if n != want {
			t.Errorf("step %s ran %d times, want %d", step, n, want)
		}
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM tasks AS t JOIN runs AS r ON r.id = t.run_id WHERE r.job_id = $1", j.ID); n != 30 {
		t.Errorf("%d tasks, want 30: a rerun keeps its tasks and items", n)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'rerun' AND actor = $1", run.BackfillActor); n != 5 {
		t.Errorf("%d rerun audit rows, want 5 (3 runs again, 2 records replaced)", n)
	}
	if n := enginetest.Int(t, pool, "SELECT sum(runs)::int FROM tenant_run_usage"); n != 5 {
		t.Errorf("usage counts %d runs, want 5", n)
	}
}

// What a backfill refuses, naming the field.
func TestBackfillErrors(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	createJob(t, pool, "often", dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("* * * * * *")}, Run: &dag.Executor{Handler: "h"}})
	createJob(t, pool, "every", dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@every 1h")}, Run: &dag.Executor{Handler: "h"}})
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := run.NewService(pool, jobs, nil)
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	often, every := job.Ref{Namespace: "default", Name: "often"}, job.Ref{Namespace: "default", Name: "every"}
	for _, c := range []struct {
		name string
		ref  job.Ref
		o    run.BackfillOptions
		want string
	}{
		{"future", often, run.BackfillOptions{From: day, To: time.Now().Add(time.Hour)}, "to: "},
		{"reversed", often, run.BackfillOptions{From: day, To: day.Add(-time.Hour)}, "to: "},
		{"too many", often, run.BackfillOptions{From: day, To: day.Add(24 * time.Hour)}, "more than 10000 instants: give allow_large"},
		{"redo some", often, run.BackfillOptions{From: day, To: day.Add(time.Minute), Redo: "some"}, `redo: "some" is not one of none, failed, all`},
		{"parallel", often, run.BackfillOptions{From: day, To: day.Add(time.Minute), MaxConcurrent: 5000}, "max_concurrent: 5000 is outside"},
		{"every", every, run.BackfillOptions{From: day, To: day.Add(24 * time.Hour)}, "@every"},
	} {
		_, err := runs.Backfill(ctx, job.Anonymous, c.ref, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ...%s...", c.name, err, c.want)
		}
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM backfills"); n != 0 {
		t.Errorf("%d backfills written by refused requests", n)
	}

	// Cancelled (no scheduler runs here: it would have stayed running):
	// once; a second cancel, or one naming the wrong job, is refused.
	b, err := runs.Backfill(ctx, job.Anonymous, often, run.BackfillOptions{From: day, To: day.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.CancelBackfill(ctx, job.Anonymous, every, b.ID); !errors.Is(err, run.ErrBackfillNotRunning) {
		t.Errorf("cancel through another job: %v", err)
	}
	c, err := runs.CancelBackfill(ctx, job.Anonymous, often, b.ID)
	if err != nil || c.Status != "cancelled" || c.FinishedAt == nil {
		t.Fatalf("cancel: %+v, %v", c, err)
	}
	if _, err := runs.CancelBackfill(ctx, job.Anonymous, often, b.ID); !errors.Is(err, run.ErrBackfillNotRunning) {
		t.Errorf("second cancel: %v", err)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'cancel_backfill'"); n != 1 {
		t.Errorf("%d cancel_backfill audit rows, want 1", n)
	}
}

func instantsOf(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) []time.Time {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	for i := range out {
		out[i] = out[i].UTC()
	}
	return out
}

// A backfill past its tenant's storage quota waits, writing nothing for
// the instants that do not fit (not skipped runs: they would be lost to
// it), says why, and goes on once there is room.
func TestBackfillWaitsForStorageRoom(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{"work": func(ctx context.Context, c executor.Call) error { return nil }})
	startPolicyNode(t, pool, node.Config{})
	createJob(t, pool, "daily", dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("0 9 * * *")}, Run: &dag.Executor{Handler: "work"}})
	if _, err := pool.Exec(ctx, "UPDATE tenants SET max_runs = 3"); err != nil {
		t.Fatal(err)
	}
	_, _, runs := services(t, pool)
	ref := job.Ref{Namespace: "default", Name: "daily"}
	b, err := runs.Backfill(ctx, job.Anonymous, ref, run.BackfillOptions{From: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 10, 10, 12, 0, 0, 0, time.UTC)})
	if err != nil || b.Total != 10 {
		t.Fatalf("backfill: %+v, %v", b, err)
	}
	enginetest.WaitFor(t, 30*time.Second, "three runs and the backfill waiting for room", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM backfills WHERE status = 'running' AND created = 3 AND reason LIKE 'waiting for storage room:%max_runs%'") == 1
	})
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs"); n != 3 {
		t.Fatalf("%d runs written, want the 3 that fit (none skipped)", n)
	}
	// Retried: under SERIALIZABLE the update may meet the backfill step's
	// read of the quota and fail with 40001.
	if err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE tenants SET max_runs = 0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "the backfill done", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM backfills WHERE status = 'done' AND created = 10 AND reason = ''") == 1
	})
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE status = 'skipped'"); n != 0 {
		t.Errorf("%d runs skipped", n)
	}
}
