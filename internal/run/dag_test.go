package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// harness runs the engine with a "step" handler that fails the steps whose
// payload says {"fail": true} (unless healed) and blocks those that say
// {"block": true} until released.
type harness struct {
	t       *testing.T
	pool    *pgxpool.Pool
	jobs    *job.Service
	runs    *run.Service
	healed  atomic.Bool
	unblock chan struct{}
}

func newHarness(t *testing.T, concurrency int) *harness {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	h := &harness{t: t, pool: pool, unblock: make(chan struct{})}
	h.jobs, _ = job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	h.runs = run.NewService(pool, h.jobs, d)
	enginetest.StartWorker(t, pool, concurrency, map[string]executor.HandlerFunc{"step": h.step})
	t.Cleanup(func() {
		select {
		case <-h.unblock:
		default:
			close(h.unblock)
		}
	})
	return h
}

func (h *harness) step(ctx context.Context, c executor.Call) error {
	var p struct{ Fail, Block bool }
	_ = json.Unmarshal(c.Payload, &p)
	if p.Block {
		select {
		case <-h.unblock:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if p.Fail && !h.healed.Load() {
		return executor.Permanent(errors.New("step " + c.Step + " failed"))
	}
	return nil
}

type stepDef struct {
	name    string
	needs   []string
	allDone bool
	fail    bool
	block   bool
}

// start creates a job of the given steps and triggers a run of it.
func (h *harness) start(name string, steps []stepDef) uuid.UUID {
	h.t.Helper()
	spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow,
		Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}}}
	for _, s := range steps {
		st := dag.Step{Name: s.name, Needs: s.needs, Run: dag.Executor{Handler: "step"}}
		if s.allDone {
			st.TriggerRule = dag.TriggerAllDone
		}
		if s.fail || s.block {
			st.Payload, _ = json.Marshal(map[string]bool{"fail": s.fail, "block": s.block})
		}
		spec.Steps = append(spec.Steps, st)
	}
	ctx := context.Background()
	if _, err := h.jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: spec}, ""); err != nil {
		h.t.Fatal(err)
	}
	r, err := h.runs.Trigger(ctx, job.Anonymous, job.Ref{Name: name}, "", false)
	if err != nil {
		h.t.Fatal(err)
	}
	return r.ID
}

func (h *harness) waitRun(id uuid.UUID, within time.Duration) string {
	h.t.Helper()
	var status string
	enginetest.WaitFor(h.t, within, "run finishes", func() bool {
		_ = h.pool.QueryRow(context.Background(), "SELECT status FROM runs WHERE id = $1", id).Scan(&status)
		return status != "pending" && status != "running"
	})
	return status
}

func (h *harness) statuses(id uuid.UUID) map[string]string {
	rows, err := h.pool.Query(context.Background(), "SELECT step, status FROM tasks WHERE run_id = $1", id)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var step, status string
		_ = rows.Scan(&step, &status)
		out[step] = status
	}
	return out
}

// checkOrder verifies invariant 4 on a finished run: every task that
// started did so after each of its parents finished, and (unless all_done)
// after each succeeded.
// checkOrder checks that every started task started after its parents
// finished. Not by released_at: now() is a transaction's start, and the
// report that releases a child (its last parent's) may have begun before
// another parent's report committed and waited for it (the child's row),
// so its released_at can precede that parent's finished_at. The child's
// start transaction begins after its release committed.
func (h *harness) checkOrder(id uuid.UUID) {
	h.t.Helper()
	bad := enginetest.Int(h.t, h.pool, `SELECT count(*) FROM tasks c
		JOIN task_edges e ON e.child_id = c.id JOIN tasks p ON p.id = e.parent_id
		WHERE c.run_id = $1 AND c.started_at IS NOT NULL AND (
			p.finished_at IS NULL OR c.started_at < p.finished_at
			OR (c.trigger_rule = 'all_success' AND p.status <> 'succeeded'))`, id)
	if bad != 0 {
		h.t.Fatalf("%d tasks started before their parents finished (or after a parent failed)", bad)
	}
}

func TestDiamond(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 8)
	enginetest.StartNode(t, h.pool)
	id := h.start("diamond", []stepDef{{name: "a"}, {name: "b", needs: []string{"a"}}, {name: "c", needs: []string{"a"}}, {name: "d", needs: []string{"b", "c"}}})
	if st := h.waitRun(id, 30*time.Second); st != "succeeded" {
		t.Fatalf("run %s: %v", st, h.statuses(id))
	}
	h.checkOrder(id)
}

func TestWideFanOutFanIn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 50)
	enginetest.StartNode(t, h.pool)
	steps := []stepDef{{name: "split"}}
	var mids []string
	for i := range 1000 {
		name := fmt.Sprintf("part-%04d", i)
		mids = append(mids, name)
		steps = append(steps, stepDef{name: name, needs: []string{"split"}})
	}
	steps = append(steps, stepDef{name: "merge", needs: mids})
	start := time.Now()
	id := h.start("wide", steps)
	if st := h.waitRun(id, 3*time.Minute); st != "succeeded" {
		t.Fatalf("run %s", st)
	}
	t.Logf("1,000-wide fan-out/fan-in finished in %s", time.Since(start).Round(time.Millisecond))
	h.checkOrder(id)
}

func TestDeepChain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	enginetest.StartNode(t, h.pool)
	steps := []stepDef{{name: "s000"}}
	for i := 1; i < 200; i++ {
		steps = append(steps, stepDef{name: fmt.Sprintf("s%03d", i), needs: []string{fmt.Sprintf("s%03d", i-1)}})
	}
	start := time.Now()
	id := h.start("deep", steps)
	if st := h.waitRun(id, 3*time.Minute); st != "succeeded" {
		t.Fatalf("run %s", st)
	}
	t.Logf("200-deep chain finished in %s", time.Since(start).Round(time.Millisecond))
	h.checkOrder(id)
}

func TestFailureInTheMiddleAndAllDone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 8)
	enginetest.StartNode(t, h.pool)
	id := h.start("etl", []stepDef{
		{name: "extract"},
		{name: "transform", needs: []string{"extract"}, fail: true},
		{name: "load", needs: []string{"transform"}},
		{name: "publish", needs: []string{"load"}},
		{name: "audit", needs: []string{"extract"}},
		{name: "cleanup", needs: []string{"load"}, allDone: true},
		{name: "notify", needs: []string{"cleanup"}},
	})
	if st := h.waitRun(id, 30*time.Second); st != "failed" {
		t.Fatalf("run %s", st)
	}
	want := map[string]string{"extract": "succeeded", "transform": "dead_lettered", "load": "upstream_failed", "publish": "upstream_failed",
		"audit": "succeeded", "cleanup": "succeeded", "notify": "succeeded"}
	if got := h.statuses(id); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tasks %v\nwant  %v", got, want)
	}
	h.checkOrder(id)
	// A run whose step failed for good is failed: a filter on failed finds
	// it, and so does one on dead_lettered, as clients of earlier versions
	// ask; a run such a version ended dead_lettered reads as failed.
	if _, err := h.pool.Exec(context.Background(), "UPDATE runs SET status = 'dead_lettered' WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	for _, status := range []string{"failed", "dead_lettered"} {
		list, _, err := h.runs.List(context.Background(), job.Anonymous, run.ListFilter{Job: job.Ref{Name: "etl"}, Status: status})
		if err != nil || len(list) != 1 || list[0].ID != id || list[0].Status != "failed" {
			t.Errorf("runs of status %s: %+v, %v; want the run, failed", status, list, err)
		}
	}
	if _, err := h.pool.Exec(context.Background(), "UPDATE runs SET status = 'failed' WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}

	// Replay the dead letter after the cause is fixed: its descendants resume.
	h.healed.Store(true)
	replayed, err := h.runs.ReplayDeadLetters(context.Background(), job.Anonymous, nil, job.Ref{Name: "etl"}, 0)
	if err != nil || len(replayed) != 1 {
		t.Fatalf("replay %v %v", replayed, err)
	}
	if st := h.waitRun(id, 30*time.Second); st != "succeeded" {
		t.Fatalf("after replay: run %s, tasks %v", st, h.statuses(id))
	}
}

func TestCancelMidRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 8)
	enginetest.StartNode(t, h.pool)
	id := h.start("slow", []stepDef{{name: "a"}, {name: "b", needs: []string{"a"}, block: true}, {name: "c", needs: []string{"b"}}})
	enginetest.WaitFor(t, 30*time.Second, "b is running", func() bool {
		return h.statuses(id)["b"] == "running"
	})
	if _, err := h.runs.CancelRun(context.Background(), job.Anonymous, id, "test"); err != nil {
		t.Fatal(err)
	}
	if st := h.waitRun(id, 10*time.Second); st != "cancelled" {
		t.Fatalf("run %s", st)
	}
	want := map[string]string{"a": "succeeded", "b": "cancelled", "c": "cancelled"}
	if got := h.statuses(id); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
}

// Random DAGs with random failures and all_done steps: every run ends with
// exactly the statuses a reference evaluation predicts, and no task was
// released before its parents allowed it.
func TestRandomDAGsSettleAsPredicted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 20)
	enginetest.StartNode(t, h.pool)
	rng := rand.New(rand.NewPCG(7, 11))
	type pending struct {
		id    uuid.UUID
		steps []stepDef
	}
	var all []pending
	for n := range 25 {
		size := 3 + rng.IntN(18)
		steps := make([]stepDef, size)
		for i := range steps {
			steps[i].name = fmt.Sprintf("s%02d", i)
			for j := range i {
				if rng.IntN(4) == 0 {
					steps[i].needs = append(steps[i].needs, steps[j].name)
				}
			}
			steps[i].allDone = len(steps[i].needs) > 0 && rng.IntN(4) == 0
			steps[i].fail = rng.IntN(6) == 0
		}
		all = append(all, pending{id: h.start(fmt.Sprintf("random-%02d", n), steps), steps: steps})
	}
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() {
			h.waitRun(p.id, 90*time.Second)
		})
	}
	wg.Wait()
	for _, p := range all {
		want := predict(p.steps)
		got := h.statuses(p.id)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("run %s:\n got %v\nwant %v", p.id, got, want)
		}
		h.checkOrder(p.id)
		if n := enginetest.Int(t, h.pool, "SELECT count(*) FROM tasks WHERE run_id = $1 AND status = 'waiting'", p.id); n != 0 {
			t.Errorf("run %s: %d tasks still waiting after the run finished", p.id, n)
		}
	}
	if t.Failed() {
		return
	}

	// The cause fixed, a replay of every dead letter finishes every run:
	// whatever failed upstream runs now, once its parents succeeded.
	h.healed.Store(true)
	if _, err := h.runs.ReplayDeadLetters(context.Background(), job.Anonymous, nil, job.Ref{}, 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		if st := h.waitRun(p.id, 90*time.Second); st != "succeeded" {
			t.Errorf("run %s after replay: %s, tasks %v", p.id, st, h.statuses(p.id))
		}
		h.checkOrderAfterReplay(p.id)
	}
}

// predict evaluates a DAG's final task statuses: a step runs when all its
// parents succeeded (all_done: when all are terminal), and then ends
// dead-lettered if it fails, succeeded otherwise; an all_success step with
// a parent that did not succeed fails upstream.
func predict(steps []stepDef) map[string]string {
	out := map[string]string{}
	for _, s := range steps { // steps only need earlier steps
		runs := true
		for _, need := range s.needs {
			if out[need] != "succeeded" && !s.allDone {
				runs = false
			}
		}
		switch {
		case !runs:
			out[s.name] = "upstream_failed"
		case s.fail:
			out[s.name] = "dead_lettered"
		default:
			out[s.name] = "succeeded"
		}
	}
	return out
}

// A replay counts the parents of the tasks below it afresh: an all_done
// child that counted the failed parent as done waits for its new attempt,
// and an all_success child revived from upstream_failed does not wait for
// a parent that succeeded while it was failed.
func TestReplayCountsParentsAfresh(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 8)
	enginetest.StartNode(t, h.pool)
	ctx := context.Background()

	// b succeeds while c is upstream_failed: c must not wait for it.
	quick := h.start("quick", []stepDef{{name: "a", fail: true}, {name: "b"}, {name: "c", needs: []string{"a", "b"}}})
	if st := h.waitRun(quick, 30*time.Second); st != "failed" {
		t.Fatalf("run %s: %v", st, h.statuses(quick))
	}

	// b still runs when a is replayed: d (all_done) counted a as done and
	// must wait for a's new attempt and for b.
	slow := h.start("slow", []stepDef{{name: "a", fail: true}, {name: "b", block: true},
		{name: "c", needs: []string{"a", "b"}}, {name: "d", needs: []string{"a", "b"}, allDone: true}})
	enginetest.WaitFor(t, 30*time.Second, "a dead-lettered, c failed upstream", func() bool {
		s := h.statuses(slow)
		return s["a"] == "dead_lettered" && s["c"] == "upstream_failed" && s["b"] == "running"
	})

	h.healed.Store(true)
	replayed, err := h.runs.ReplayDeadLetters(ctx, job.Anonymous, nil, job.Ref{}, 0)
	if err != nil || len(replayed) != 2 {
		t.Fatalf("replay %v %v", replayed, err)
	}
	if st := h.waitRun(quick, 30*time.Second); st != "succeeded" {
		t.Fatalf("quick after replay: run %s, tasks %v", st, h.statuses(quick))
	}
	enginetest.WaitFor(t, 30*time.Second, "a succeeds on replay", func() bool { return h.statuses(slow)["a"] == "succeeded" })
	if s := h.statuses(slow); s["d"] != "waiting" || s["c"] != "waiting" {
		t.Fatalf("with b still running, c and d must wait: %v", s)
	}
	close(h.unblock)
	if st := h.waitRun(slow, 30*time.Second); st != "succeeded" {
		t.Fatalf("slow after replay: run %s, tasks %v", st, h.statuses(slow))
	}
	h.checkOrderAfterReplay(slow)
}

// The dead letters of a cancelled run are history: not listed, not
// replayed, and the run stays cancelled with no task open.
func TestReplayLeavesCancelledRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 8)
	enginetest.StartNode(t, h.pool)
	ctx := context.Background()
	id := h.start("gone", []stepDef{{name: "a", fail: true}, {name: "b", block: true}})
	enginetest.WaitFor(t, 30*time.Second, "a dead-lettered, b running", func() bool {
		s := h.statuses(id)
		return s["a"] == "dead_lettered" && s["b"] == "running"
	})
	if _, err := h.runs.CancelRun(ctx, job.Anonymous, id, "test"); err != nil {
		t.Fatal(err)
	}
	if st := h.waitRun(id, 10*time.Second); st != "cancelled" {
		t.Fatalf("run %s", st)
	}
	listed, _, err := h.runs.ListDeadLetters(ctx, job.Anonymous, job.Ref{}, 0, "")
	if err != nil || len(listed) != 0 {
		t.Fatalf("dead letters of a cancelled run listed: %d %v", len(listed), err)
	}
	var task uuid.UUID
	_ = h.pool.QueryRow(ctx, "SELECT id FROM tasks WHERE run_id = $1 AND step = 'a'", id).Scan(&task)
	h.healed.Store(true)
	replayed, err := h.runs.ReplayDeadLetters(ctx, job.Anonymous, []uuid.UUID{task}, job.Ref{}, 0)
	if err != nil || len(replayed) != 0 {
		t.Fatalf("replay of a cancelled run's task: %v %v", replayed, err)
	}
	if s := h.statuses(id); s["a"] != "dead_lettered" || s["b"] != "cancelled" {
		t.Fatalf("tasks %v", s)
	}
}

// checkOrderAfterReplay verifies invariant 4 on a run that was replayed:
// an all_success task started after each parent's last end (an all_done
// task may have run before a replayed parent ran again).
func (h *harness) checkOrderAfterReplay(id uuid.UUID) {
	h.t.Helper()
	bad := enginetest.Int(h.t, h.pool, `SELECT count(*) FROM tasks c
		JOIN task_edges e ON e.child_id = c.id JOIN tasks p ON p.id = e.parent_id
		WHERE c.run_id = $1 AND c.trigger_rule = 'all_success' AND c.started_at IS NOT NULL
		  AND (p.status <> 'succeeded' OR c.started_at < p.finished_at)`, id)
	if bad != 0 {
		h.t.Fatalf("%d tasks started before their parents succeeded", bad)
	}
}
