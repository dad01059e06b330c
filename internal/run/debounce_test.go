package run_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// A trigger that joins a debounced run gives it all that comes from the
// trigger: params, event, upstream run, trigger kind and who is behind
// it; a cancel ends its debounce; a paused job's due run waits for it to
// resume; a deleted job's is cancelled, saying why.
func TestDebounceJoinsPausesAndDeletes(t *testing.T) {
	x := newInTx(t)
	spec := dag.JobSpec{Overlap: dag.OverlapAllow, Debounce: &dag.Debounce{Period: dag.Duration{Duration: time.Second}},
		Steps: []dag.Step{{Name: "a", Run: dag.Executor{Handler: "noop"}}}}
	j := x.job(spec)
	at := time.Now()
	insert := func(n run.New) uuid.UUID {
		t.Helper()
		n.Job, n.Status = j, lifecycle.RunPending
		if n.At.IsZero() {
			at = at.Add(time.Millisecond)
			n.At = at
		}
		ids, err := x.apply.Insert(x.ctx, x.tx, []run.New{n}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ids[0]
	}
	first := insert(run.New{Trigger: lifecycle.TriggerUpstream, Upstream: []byte(`{"run": "first"}`)})
	if again := insert(run.New{Trigger: lifecycle.TriggerUpstream, Upstream: []byte(`{"run": "second"}`)}); again != first {
		t.Fatalf("a second upstream end made run %s, not %s", again, first)
	}
	if got := x.text(`SELECT trigger || ' ' || (upstream->>'run') || ' ' || debounce_count FROM runs WHERE id = $1`, first); got != "upstream second 2" {
		t.Errorf("after an upstream join: %s, want the last upstream run's end", got)
	}
	insert(run.New{Trigger: lifecycle.TriggerManual, Params: dag.Payload(`{}`), By: "bob"})
	if got := x.text(`SELECT trigger || ' ' || COALESCE(upstream::text, 'none') || ' ' || triggered_by FROM runs WHERE id = $1`, first); got != "manual none bob" {
		t.Errorf("after a manual join: %s, want the trigger's kind and principal", got)
	}
	if _, err := x.apply.Cancel(x.ctx, x.tx, []uuid.UUID{first}, "by hand"); err != nil {
		t.Fatal(err)
	}
	if got := x.text(`SELECT status || ' ' || debouncing FROM runs WHERE id = $1`, first); got != "cancelled false" {
		t.Errorf("a cancelled debounced run: %s", got)
	}

	// Paused: due, it waits; resumed, it starts.
	waiting := insert(run.New{Trigger: lifecycle.TriggerManual, Params: dag.Payload(`{}`)})
	x.exec(`UPDATE runs SET debounce_at = now() - interval '1 second' WHERE id = $1`, waiting)
	x.exec(`UPDATE jobs SET status = 'paused' WHERE id = $1`, j.ID)
	fire := func() []uuid.UUID {
		t.Helper()
		ids, err := x.apply.FireDebounced(x.ctx, x.tx, []int32{0}, 10)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got := fire(); len(got) != 0 {
		t.Errorf("a paused job's debounced run started: %v", got)
	}
	x.exec(`UPDATE jobs SET status = 'active' WHERE id = $1`, j.ID)
	if got := fire(); len(got) != 1 || got[0] != waiting {
		t.Errorf("the resumed job's debounced run: %v", got)
	}
	if got := x.text(`SELECT status || ' ' || debouncing || ' ' || (debounce_at IS NOT NULL) FROM runs WHERE id = $1`, waiting); got != "pending false true" {
		t.Errorf("a started debounced run: %s (debounce_at kept: when it started)", got)
	}

	// Deleted: cancelled, saying why.
	orphan := insert(run.New{Trigger: lifecycle.TriggerManual, Params: dag.Payload(`{}`)})
	x.exec(`UPDATE runs SET debounce_at = now() - interval '1 second' WHERE id = $1`, orphan)
	x.exec(`UPDATE jobs SET status = 'deleted' WHERE id = $1`, j.ID)
	fire()
	if got := x.text(`SELECT status || ': ' || reason FROM runs WHERE id = $1`, orphan); got != "cancelled: "+run.ReasonDebouncedJobDeleted {
		t.Errorf("a deleted job's debounced run: %s", got)
	}
}

// Cancelling a debounced run that waits starts no run its job's overlap:
// queue holds back (it was never active), and retried, it is active to
// the overlap policy as any run.
func TestDebounceCancelKeepsTheOverlap(t *testing.T) {
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
	j, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "q"}, Spec: dag.JobSpec{
		Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Run: &dag.Executor{Handler: "noop"}, Overlap: dag.OverlapQueue,
		Debounce: &dag.Debounce{Period: dag.Duration{Duration: time.Hour}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	ref := job.Ref{ID: j.ID}
	active, err := runs.TriggerWith(ctx, job.Anonymous, ref, run.TriggerOptions{IgnoreOverlap: true})
	if err != nil || active.Status != lifecycle.RunPending {
		t.Fatalf("a trigger ignoring overlap: %+v (%v)", active, err)
	}
	var held uuid.UUID // a run overlap: queue holds back (as a firing writes it)
	if err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		ids, err := (&run.Applier{Dispatcher: d}).Insert(ctx, tx, []run.New{{Job: run.JobRef{ID: j.ID, Tenant: j.Tenant, Version: j.Version, Shard: j.Shard, Spec: &j.Spec},
			At: time.Now().Add(time.Minute), Trigger: lifecycle.TriggerSchedule, Status: lifecycle.RunQueued, Reason: "overlap: queue"}}, nil, nil)
		held = ids[0]
		return err
	}); err != nil {
		t.Fatal(err)
	}
	debounced, err := runs.TriggerWith(ctx, job.Anonymous, ref, run.TriggerOptions{})
	if err != nil || debounced.Status != lifecycle.RunQueued || debounced.DebounceAt == nil {
		t.Fatalf("a debounced trigger: %+v (%v)", debounced, err)
	}
	if _, err := runs.CancelRun(ctx, job.Anonymous, debounced.ID, ""); err != nil {
		t.Fatal(err)
	}
	status := func(id uuid.UUID) string {
		var s string
		if err := store.Retry(ctx, func() error { return pool.QueryRow(ctx, "SELECT status FROM runs WHERE id = $1", id).Scan(&s) }); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := status(held); s != "queued" {
		t.Errorf("the run overlap held back is %s after the debounced run's cancel, while %s is active", s, active.ID)
	}
	if _, err := runs.RetryRun(ctx, job.Anonymous, debounced.ID, true); err != nil {
		t.Fatal(err)
	}
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM runs WHERE job_id = $1 AND id = $2 AND finished_at IS NULL
		AND status IN ('queued', 'pending', 'running') AND NOT debouncing`, j.ID, debounced.ID); n != 1 {
		t.Errorf("the retried run is not among the job's active runs")
	}
}
