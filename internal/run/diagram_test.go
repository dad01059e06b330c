package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// drawn reads the arrows of the state diagrams in docs/lifecycle.md: the
// mermaid blocks marked "%% tasks" and "%% runs", as "from -> to" (from
// "[*]" for a creation; arrows into "[*]" only mark terminal states).
func drawn(t *testing.T) map[string][]string {
	t.Helper()
	text, err := os.ReadFile("../../docs/lifecycle.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```mermaid\n(.*?)```")
	arrow := regexp.MustCompile(`(?m)^\s*(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)`)
	out := map[string][]string{}
	for _, b := range block.FindAllStringSubmatch(string(text), -1) {
		var kind string
		switch {
		case strings.Contains(b[1], "%% tasks"):
			kind = "tasks"
		case strings.Contains(b[1], "%% runs"):
			kind = "runs"
		default:
			continue
		}
		for _, a := range arrow.FindAllStringSubmatch(b[1], -1) {
			if a[2] == "[*]" {
				continue
			}
			if e := a[1] + " -> " + a[2]; !slices.Contains(out[kind], e) {
				out[kind] = append(out[kind], e)
			}
		}
	}
	if len(out["tasks"]) == 0 || len(out["runs"]) == 0 {
		t.Fatalf("no diagrams found in docs/lifecycle.md: %v", out)
	}
	return out
}

// TestDiagram walks runs through every transition docs/lifecycle.md draws
// and records every status change the engine makes (a trigger on tasks and
// runs): each drawn arrow must be taken, and no change may be undrawn.
func TestDiagram(t *testing.T) {
	t.Parallel()
	want := drawn(t)
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		CREATE TABLE transitions (kind text NOT NULL, from_status text NOT NULL, to_status text NOT NULL);
		CREATE FUNCTION log_transition() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF TG_OP = 'INSERT' THEN
				INSERT INTO transitions VALUES (TG_TABLE_NAME, '[*]', NEW.status);
			ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
				INSERT INTO transitions VALUES (TG_TABLE_NAME, OLD.status, NEW.status);
			END IF;
			RETURN NULL;
		END $$;
		CREATE TRIGGER tasks_transitions AFTER INSERT OR UPDATE OF status ON tasks FOR EACH ROW EXECUTE FUNCTION log_transition();
		CREATE TRIGGER runs_transitions AFTER INSERT OR UPDATE OF status ON runs FOR EACH ROW EXECUTE FUNCTION log_transition();
	`); err != nil {
		t.Fatal(err)
	}

	// The steps: {"do": "ok" | "fail" (for good, until healed) | "flaky"
	// (fails its first attempt, or every one with "always") | "block"
	// (until its key is released) | "fail-then-block" (fails until healed,
	// then blocks)}.
	var healed atomic.Bool
	gates := enginetest.NewGates(t)
	handler := func(ctx context.Context, c executor.Call) error {
		var p struct {
			Do, Key string
			Always  bool
		}
		_ = json.Unmarshal(c.Payload, &p)
		switch p.Do {
		case "fail":
			if !healed.Load() {
				return executor.Permanent(errors.New("failed for good"))
			}
		case "flaky":
			if c.Attempt == 1 || p.Always {
				return errors.New("failed, may retry")
			}
		case "fail-then-block":
			if !healed.Load() {
				return executor.Permanent(errors.New("failed for good"))
			}
			fallthrough
		case "block":
			select {
			case <-gates.Wait(p.Key):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	enginetest.StartWorker(t, pool, 8, map[string]executor.HandlerFunc{"diagram": handler})
	enginetest.StartNode(t, pool)

	type step struct {
		name, do, key, queue, when, forEach string
		needs                               []string
		always                              bool
		retry                               *dag.Retry
		maxParallel                         int
		sleep                               time.Duration // a parked step (docs/parked-steps.md)
		lapse                               time.Duration // an approval that times out, skipped
	}
	create := func(name string, overlap dag.OverlapPolicy, steps ...step) {
		t.Helper()
		spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: overlap,
			Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}}}
		for _, s := range steps {
			payload, _ := json.Marshal(map[string]any{"do": s.do, "key": s.key, "always": s.always})
			if s.sleep > 0 {
				spec.Steps = append(spec.Steps, dag.Step{Name: s.name, Needs: s.needs, When: s.when, Sleep: &dag.Sleep{For: s.sleep}})
				continue
			}
			if s.lapse > 0 {
				spec.Steps = append(spec.Steps, dag.Step{Name: s.name, Needs: s.needs, Approval: &dag.Approval{Timeout: dag.D(s.lapse), OnTimeout: dag.TimeoutSkips}})
				continue
			}
			spec.Steps = append(spec.Steps, dag.Step{Name: s.name, Needs: s.needs, Queue: s.queue, Retry: s.retry, When: s.when,
				ForEach: s.forEach, MaxParallel: s.maxParallel, Run: dag.Executor{Handler: "diagram"}, Payload: payload})
		}
		if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: spec}, ""); err != nil {
			t.Fatal(err)
		}
	}
	trigger := func(name string) *run.Run {
		t.Helper()
		r, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: name}, "", false)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	status := func(sql string, args ...any) string {
		var s string
		_ = pool.QueryRow(ctx, sql, args...).Scan(&s)
		return s
	}
	runIs := func(id uuid.UUID, want string) {
		t.Helper()
		enginetest.WaitFor(t, 30*time.Second, "run "+want, func() bool { return status("SELECT status FROM runs WHERE id = $1", id) == want })
	}
	taskIs := func(id uuid.UUID, step, want string) {
		t.Helper()
		enginetest.WaitFor(t, 30*time.Second, step+" "+want, func() bool {
			return status("SELECT status FROM tasks WHERE run_id = $1 AND step = $2", id, step) == want
		})
	}
	cancel := func(id uuid.UUID) {
		t.Helper()
		if _, err := runs.CancelRun(ctx, job.Anonymous, id, "diagram"); err != nil {
			t.Fatal(err)
		}
	}
	fast := &dag.Retry{MaxAttempts: 2, Initial: dag.D(10 * time.Millisecond), Max: dag.D(10 * time.Millisecond)}
	slow := &dag.Retry{MaxAttempts: 3, Initial: dag.D(time.Hour), Max: dag.D(time.Hour)}

	// A chain that succeeds, a step that retries once, a failure for good
	// with a step below it.
	create("chain", dag.OverlapAllow, step{name: "a", do: "ok"}, step{name: "b", do: "ok", needs: []string{"a"}})
	create("retry", dag.OverlapAllow, step{name: "a", do: "flaky", retry: fast})
	create("broken", dag.OverlapAllow, step{name: "a", do: "fail"}, step{name: "b", do: "ok", needs: []string{"a"}})
	chain, retry, broken := trigger("chain"), trigger("retry"), trigger("broken")
	runIs(chain.ID, "succeeded")
	runIs(retry.ID, "succeeded")
	runIs(broken.ID, "failed")

	// Cancelled: before any attempt (a queue no worker serves), while a
	// step runs with another waiting below it, and during a backoff.
	create("parked", dag.OverlapAllow, step{name: "a", do: "ok", queue: "nowhere"})
	create("blocked", dag.OverlapAllow, step{name: "a", do: "block", key: "blocked"}, step{name: "b", do: "ok", needs: []string{"a"}})
	create("backoff", dag.OverlapAllow, step{name: "a", do: "flaky", always: true, retry: slow})
	parked, blocked, backoff := trigger("parked"), trigger("blocked"), trigger("backoff")
	taskIs(blocked.ID, "a", "running")
	taskIs(backoff.ID, "a", "retrying")
	for _, r := range []*run.Run{parked, blocked, backoff} {
		cancel(r.ID)
		runIs(r.ID, "cancelled")
	}

	// overlap: queue holds a run back, refuses a second, and starts the
	// held run when the active one ends; a held run can be cancelled.
	create("held", dag.OverlapQueue, step{name: "a", do: "block", key: "held"})
	first := trigger("held")
	taskIs(first.ID, "a", "running")
	if r := trigger("held"); r.Status != "queued" {
		t.Fatalf("second run of held: %s", r.Status)
	} else {
		cancel(r.ID)
	}
	second := trigger("held")
	if r := trigger("held"); r.Status != "skipped" {
		t.Fatalf("third run of held: %s", r.Status)
	}
	gates.Open("held")
	runIs(first.ID, "succeeded")
	runIs(second.ID, "succeeded")

	// A firing pass over missed instants under cancel_previous writes the
	// older instants it fires cancelled.
	spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("* * * * *")}, Misfire: dag.MisfireBackfill, MaxBackfill: 3,
		Overlap: dag.OverlapCancelPrevious, Run: &dag.Executor{Handler: "diagram"}}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "missed"}, Spec: spec}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE job_schedules SET next_fire_at = date_trunc('minute', now()) - interval '30 minutes'
		WHERE job_id = (SELECT id FROM jobs WHERE name = 'missed')`); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "the missed instants fired", func() bool {
		return enginetest.Int(t, pool, `SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id
			WHERE j.name = 'missed' AND r.status = 'succeeded'`) > 0
	})
	if _, err := jobs.Pause(ctx, job.Anonymous, job.Ref{Name: "missed"}); err != nil {
		t.Fatal(err)
	}

	// Replayed before the cause is fixed: the reopened run fails again.
	create("again", dag.OverlapAllow, step{name: "a", do: "fail"})
	create("reopened", dag.OverlapAllow, step{name: "a", do: "fail-then-block", key: "reopened"})
	again, reopened := trigger("again"), trigger("reopened")
	runIs(again.ID, "failed")
	runIs(reopened.ID, "failed")
	if _, err := runs.ReplayDeadLetters(ctx, job.Anonymous, nil, job.Ref{Name: "again"}, 0); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "the replayed attempt fails", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.run_id = $1 AND a.outcome = 'failed'", again.ID) == 2
	})
	runIs(again.ID, "failed")

	// Conditions: a false one skips its step, and the step below it
	// (all_success); one that cannot be evaluated dead-letters its step,
	// and is decided again (and fails again) when replayed.
	create("skip", dag.OverlapAllow, step{name: "a", do: "ok", when: "${{ false }}"}, step{name: "b", do: "ok", needs: []string{"a"}})
	create("unevaluable", dag.OverlapAllow, step{name: "a", do: "ok"}, step{name: "b", do: "ok", needs: []string{"a"}, when: "${{ steps.a.output.nope }}"})
	skip, unevaluable := trigger("skip"), trigger("unevaluable")
	runIs(skip.ID, "succeeded")
	runIs(unevaluable.ID, "failed")
	if _, err := runs.ReplayDeadLetters(ctx, job.Anonymous, nil, job.Ref{Name: "unevaluable"}, 0); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "the replayed condition fails again", func() bool {
		return enginetest.Int(t, pool, `SELECT count(*) FROM transitions WHERE kind = 'tasks' AND from_status = 'dead_lettered' AND to_status = 'waiting'`) > 0 &&
			status("SELECT status FROM runs WHERE id = $1", unevaluable.ID) == "failed"
	})
	// Fan-out: a group expanded into items that all succeed (two at a
	// time), one whose item fails for good, one cancelled while its items
	// run.
	create("fan", dag.OverlapAllow, step{name: "each", do: "ok", forEach: "${{ [1, 2, 3] }}", maxParallel: 2}, step{name: "after", do: "ok", needs: []string{"each"}})
	create("fan-fails", dag.OverlapAllow, step{name: "each", do: "fail", forEach: "${{ [1, 2] }}"})
	create("fan-cancelled", dag.OverlapAllow, step{name: "each", do: "block", key: "fan-cancelled", forEach: "${{ [1, 2, 3] }}", maxParallel: 1})
	fan, fanFails, fanCancelled := trigger("fan"), trigger("fan-fails"), trigger("fan-cancelled")
	runIs(fan.ID, "succeeded")
	runIs(fanFails.ID, "failed")
	taskIs(fanCancelled.ID, "each[0]", "running")
	cancel(fanCancelled.ID)
	runIs(fanCancelled.ID, "cancelled")

	// Parked steps: one that sleeps and wakes, one cancelled asleep.
	create("nap", dag.OverlapAllow, step{name: "nap", sleep: time.Second}, step{name: "after", do: "ok", needs: []string{"nap"}})
	create("nap-cancelled", dag.OverlapAllow, step{name: "nap", sleep: time.Hour})
	nap, napCancelled := trigger("nap"), trigger("nap-cancelled")
	runIs(nap.ID, "succeeded")
	taskIs(napCancelled.ID, "nap", "running")
	cancel(napCancelled.ID)
	runIs(napCancelled.ID, "cancelled")
	// Concurrency keys: a run queued at its key's limit starts when the
	// first ends; a key that does not evaluate fails the run as it is
	// written.
	keyedSpec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow,
		Params:      map[string]dag.Param{"k": {Type: "string", Default: dag.Payload(`"one"`)}},
		Concurrency: []dag.ConcurrencyLimit{{Key: "${{ params.k }}", Limit: 1}},
		Steps:       []dag.Step{{Name: "a", Run: dag.Executor{Handler: "diagram"}, Payload: dag.Payload(`{"do": "block", "key": "keyed"}`)}}}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "keyed"}, Spec: keyedSpec}, ""); err != nil {
		t.Fatal(err)
	}
	keyedRun := func(k string) *run.Run {
		t.Helper()
		r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "keyed"}, run.TriggerOptions{ParamTexts: map[string]string{"k": k}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k1, k2 := keyedRun("one"), keyedRun("one")
	if k2.Status != lifecycle.RunQueued {
		t.Errorf("the second run of key one is %s", k2.Status)
	}
	if bad := keyedRun(strings.Repeat("x", 300)); bad.Status != lifecycle.RunFailed {
		t.Errorf("a run whose key does not evaluate is %s", bad.Status)
	}
	gates.Open("keyed")
	runIs(k1.ID, "succeeded")
	runIs(k2.ID, "succeeded")
	// An approval nobody decides, skipped at its timeout, with its child.
	create("lapse", dag.OverlapAllow, step{name: "ask", lapse: time.Second}, step{name: "after", do: "ok", needs: []string{"ask"}})
	runIs(trigger("lapse").ID, "succeeded")

	// A step failed upstream by one parent, and skipped by the other
	// (later): once the failed parent is replayed, it is skipped.
	create("late-skip", dag.OverlapAllow, step{name: "x", do: "block", key: "late-skip"}, step{name: "s", do: "ok", needs: []string{"x"}, when: "${{ false }}"},
		step{name: "a", do: "fail"}, step{name: "c", do: "ok", needs: []string{"a", "s"}})
	lateSkip := trigger("late-skip")
	taskIs(lateSkip.ID, "c", "upstream_failed")
	gates.Open("late-skip")
	runIs(lateSkip.ID, "failed")

	// The cause fixed, the dead letters replayed: the step below it runs,
	// and a reopened run is cancelled while it runs.
	healed.Store(true)
	if _, err := runs.ReplayDeadLetters(ctx, job.Anonymous, nil, job.Ref{Name: "late-skip"}, 0); err != nil {
		t.Fatal(err)
	}
	runIs(lateSkip.ID, "succeeded")
	taskIs(lateSkip.ID, "c", "skipped")

	// Retried from where it failed: the run cancelled while a step ran,
	// and the one whose step failed for good.
	gates.Open("blocked")
	for _, r := range []*run.Run{blocked, again} {
		if _, err := runs.RetryRun(ctx, job.Anonymous, r.ID, false); err != nil {
			t.Fatal(err)
		}
		runIs(r.ID, "succeeded")
	}
	if _, err := runs.ReplayDeadLetters(ctx, job.Anonymous, nil, job.Ref{Name: "reopened"}, 0); err != nil {
		t.Fatal(err)
	}
	taskIs(reopened.ID, "a", "running")
	cancel(reopened.ID)
	runIs(reopened.ID, "cancelled")
	if _, err := runs.ReplayDeadLetters(ctx, job.Anonymous, nil, job.Ref{Name: "broken"}, 0); err != nil {
		t.Fatal(err)
	}
	runIs(broken.ID, "succeeded")

	// A backfill's redo all: a run that succeeded runs again from the
	// start, every step (c, skipped by its condition, waits again and is
	// skipped again); an instant recorded skipped gets a run of the
	// backfill in the record's place (the record is deleted, which no
	// arrow draws).
	create("rerun", dag.OverlapAllow, step{name: "a", do: "ok"}, step{name: "b", do: "ok", needs: []string{"a"}},
		step{name: "c", do: "ok", needs: []string{"a"}, when: "${{ false }}"})
	rerunJob, err := jobs.Get(ctx, job.Anonymous, job.Ref{Name: "rerun"})
	if err != nil {
		t.Fatal(err)
	}
	y2024, y2025 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := store.InRawTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := (&run.Applier{Dispatcher: d}).Insert(ctx, tx, []run.New{{Job: run.JobRef{ID: rerunJob.ID, Tenant: rerunJob.Tenant,
			Version: rerunJob.Version, Shard: rerunJob.Shard, Spec: &rerunJob.Spec}, At: y2024, Trigger: lifecycle.TriggerSchedule,
			Status: lifecycle.RunSkipped, Reason: "misfire: skip"}}, nil, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	backfill := func(redo string) {
		t.Helper()
		b, err := runs.Backfill(ctx, job.Anonymous, job.Ref{Name: "rerun"}, run.BackfillOptions{From: y2024, To: y2025, Redo: redo})
		if err != nil {
			t.Fatal(err)
		}
		enginetest.WaitFor(t, 30*time.Second, "backfill "+redo+" done", func() bool {
			return status("SELECT status FROM backfills WHERE id = $1", b.ID) == "done" &&
				status("SELECT count(*)::text FROM runs WHERE job_id = $1 AND status = 'succeeded'", rerunJob.ID) == map[string]string{"none": "1", "all": "2"}[redo]
		})
	}
	backfill(run.RedoNone)
	backfill(run.RedoAll)
	if n := status("SELECT count(*)::text FROM attempts AS a JOIN tasks AS t ON t.id = a.task_id JOIN runs AS r ON r.id = t.run_id WHERE r.job_id = $1", rerunJob.ID); n != "6" {
		t.Errorf("%s attempts of the rerun job, want 6: each step of 2025 twice, of 2024 once", n)
	}

	rows, err := pool.Query(ctx, "SELECT DISTINCT kind, from_status || ' -> ' || to_status FROM transitions")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for rows.Next() {
		var kind, tr string
		if err := rows.Scan(&kind, &tr); err != nil {
			t.Fatal(err)
		}
		got[kind] = append(got[kind], tr)
	}
	for _, kind := range []string{"tasks", "runs"} {
		for _, e := range want[kind] {
			if !slices.Contains(got[kind], e) {
				t.Errorf("%s: %s is drawn, and no run took it", kind, e)
			}
		}
		for _, e := range got[kind] {
			if !slices.Contains(want[kind], e) {
				t.Errorf("%s: %s happened, and docs/lifecycle.md does not draw it", kind, e)
			}
		}
	}
}
