package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/event"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

// person is an actor of the default tenant holding role on every job.
func person(name, role string) job.Actor {
	rank := map[string]int{"reader": 1, "editor": 2, "admin": 3}
	return job.Actor{Tenant: job.DefaultTenant, Name: name + " (ok_" + name + ")", Principal: name,
		Holds: func(_, _, want string) bool { return rank[role] >= rank[want] }}
}

// A step that asks for an approval parks with its message rendered, and
// is decided by people: who may decide is the approval's (its role, its
// principals, separate from who triggered the run), each principal once
// an attempt; its count of approvals succeeds it with the decision as its
// output, a rejection fails it, and a retry asks again from nobody. Its
// timeout fails it or, with on_timeout: skip, skips it and its
// all_success children. Each decision is audited with its comment; a
// refused one writes nothing.
func TestApprovalStepsAreDecided(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	after := startNoteWorker(t, pool)
	startPolicyNode(t, pool, node.Config{})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	createJob(t, pool, "refund", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Params: map[string]dag.Param{"amount": {Type: "integer"}},
		Steps: []dag.Step{
			{Name: "ok", Approval: &dag.Approval{Count: 2, Separate: true, Timeout: dag.D(time.Hour), Message: "Refund ${{ params.amount }}?"}},
			{Name: "after", Needs: []string{"ok"}, Run: dag.Executor{Handler: "note"}, Payload: dag.Payload(`{"by": "${{ steps.ok.output.by }}", "n": "${{ size(steps.ok.output.approvals) }}"}`)},
		}})
	createJob(t, pool, "only-dan", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "ok", Approval: &dag.Approval{Role: "admin", Principals: []string{"dan"}, Timeout: dag.D(time.Hour)}}}})
	createJob(t, pool, "lapse", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{
			{Name: "ok", Approval: &dag.Approval{Timeout: dag.D(time.Second), OnTimeout: dag.TimeoutSkips}},
			{Name: "after", Needs: []string{"ok"}, Run: dag.Executor{Handler: "note"}},
			{Name: "anyway", Needs: []string{"ok"}, TriggerRule: dag.TriggerAllDone, Run: dag.Executor{Handler: "note"}},
		}})
	createJob(t, pool, "lapse-fails", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "ok", Approval: &dag.Approval{Timeout: dag.D(time.Second)}}}})
	// Who is behind a run is who published its event, or who triggered
	// its tree's root.
	separate := []dag.Step{{Name: "ok", Approval: &dag.Approval{Separate: true, Timeout: dag.D(time.Hour)}}}
	createJob(t, pool, "on-refund", dag.JobSpec{Schedule: schedule.Spec{Event: &schedule.Event{Type: "refund.asked"}}, Overlap: dag.OverlapAllow, Steps: separate})
	createJob(t, pool, "inner", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow, Steps: separate})
	createJob(t, pool, "outer", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "call", Run: dag.Executor{Job: &dag.JobCall{Name: "inner"}}}}})
	jobs, _, runs := services(t, pool)
	ann, bob, cat, dan, rex := person("ann", "editor"), person("bob", "editor"), person("cat", "admin"), person("dan", "admin"), person("rex", "reader")
	trigger := func(a job.Actor, name string, params map[string]string) uuid.UUID {
		t.Helper()
		r, err := runs.TriggerWith(ctx, a, job.Ref{Namespace: "default", Name: name}, run.TriggerOptions{IgnoreOverlap: true, ParamTexts: params})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	asking := func(id uuid.UUID) bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM parked_steps WHERE run_id = $1 AND kind = 'approval'", id) == 1
	}
	audits := func(id uuid.UUID) int {
		return enginetest.Int(t, pool, "SELECT count(*) FROM audit_log WHERE target_id = $1 AND action IN ('approve', 'reject')", id)
	}
	decide := func(a job.Actor, id uuid.UUID, step string, approve bool, comment string) (*run.Task, error) {
		return runs.Decide(ctx, a, run.Decision{Run: id, Step: step, Approve: approve, Comment: comment})
	}
	denied := func(err error, field string) bool {
		var d *run.DeniedError
		return errors.As(err, &d) && d.Field == field
	}

	r1 := trigger(ann, "refund", map[string]string{"amount": "42"})
	enginetest.WaitFor(t, 20*time.Second, "the approval parked", func() bool { return asking(r1) })
	d, err := runs.Get(ctx, ann, r1, run.ItemsPage{})
	if err != nil {
		t.Fatal(err)
	}
	if a := d.Tasks[0].Approval; d.TriggeredBy != "ann" || a == nil || a.Message != "Refund 42?" || a.Ask.Approvers() != 2 || a.TriggeredBy != "ann" ||
		!strings.HasPrefix(d.Tasks[0].WaitReason, "approval by editor 0/2 until ") {
		t.Fatalf("the parked approval reads %+v (%q), triggered by %q", d.Tasks[0].Approval, d.Tasks[0].WaitReason, d.TriggeredBy)
	}
	if _, err := decide(ann, r1, "ok", true, ""); !denied(err, "approval.separate") {
		t.Errorf("who triggered the run approved it: %v", err)
	}
	if _, err := decide(rex, r1, "ok", true, ""); !denied(err, "approval.role") {
		t.Errorf("a reader approved: %v", err)
	}
	if _, err := decide(bob, r1, "after", true, ""); !errors.Is(err, run.ErrNotAwaitingApproval) {
		t.Errorf("a step that asks for none was approved: %v", err)
	}
	if _, err := decide(bob, r1, "nope", true, ""); !errors.Is(err, run.ErrNoStep) {
		t.Errorf("an unknown step: %v", err)
	}
	var fe *dag.FieldError
	if _, err := decide(bob, r1, "ok", true, strings.Repeat("x", run.MaxComment+1)); !errors.As(err, &fe) || fe.Field != "comment" {
		t.Errorf("a comment past the bound: %v", err)
	}
	if _, err := decide(job.Actor{Tenant: uuid.Must(uuid.NewV7()), Name: "eve", Principal: "eve"}, r1, "ok", true, ""); !errors.Is(err, run.ErrNotFound) {
		t.Errorf("another tenant's principal reached the run: %v", err)
	}
	if n := audits(r1); n != 0 {
		t.Fatalf("refused decisions wrote %d audit rows", n)
	}
	task, err := decide(bob, r1, "ok", true, "fine by me")
	if err != nil || task.Status != "running" || !strings.HasPrefix(task.WaitReason, "approval by editor 1/2") || len(task.Approval.Decisions) != 1 {
		t.Fatalf("bob's approval: %+v (%v)", task, err)
	}
	if _, err := decide(bob, r1, "ok", true, "again"); !errors.Is(err, run.ErrDecidedAlready) {
		t.Errorf("bob approved twice: %v", err)
	}
	if task, err = decide(cat, r1, "ok", true, "ok"); err != nil || task.Status != "succeeded" {
		t.Fatalf("cat's approval: %+v (%v)", task, err)
	}
	enginetest.WaitFor(t, 30*time.Second, "the approved run succeeds", func() bool { return runStatus(t, pool, r1) == "succeeded" })
	if p := after(r1); !strings.Contains(p, `"by":"cat"`) || !strings.Contains(p, `"n":2`) {
		t.Errorf("the step after read %q, want the decision by cat of 2 approvals", p)
	}
	var out struct {
		Decision  string
		Approvals []struct{ By, Comment string }
	}
	var output string
	if err := pool.QueryRow(ctx, "SELECT a.output FROM every_attempt a JOIN tasks t ON t.id = a.task_id WHERE t.run_id = $1 AND t.step = 'ok'", r1).Scan(&output); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(output), &out); err != nil || out.Decision != "approved" || len(out.Approvals) != 2 || out.Approvals[0].By != "bob" || out.Approvals[0].Comment != "fine by me" {
		t.Errorf("the approval's output: %s (%v)", output, err)
	}
	if n := audits(r1); n != 2 {
		t.Errorf("%d decisions audited, want 2", n)
	}
	if _, err := decide(dan, r1, "ok", true, ""); !errors.Is(err, run.ErrNotAwaitingApproval) {
		t.Errorf("an ended approval was approved: %v", err)
	}

	// A rejection fails the step; a retry asks again, from nobody.
	r2 := trigger(ann, "refund", map[string]string{"amount": "7"})
	enginetest.WaitFor(t, 20*time.Second, "the approval parked", func() bool { return asking(r2) })
	if _, err := decide(bob, r2, "ok", false, "too much"); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "the rejected run fails", func() bool { return runStatus(t, pool, r2) == "failed" })
	var last string
	if err := pool.QueryRow(ctx, "SELECT last_error FROM tasks WHERE run_id = $1 AND step = 'ok'", r2).Scan(&last); err != nil || last != "rejected by bob: too much" {
		t.Errorf("the rejected step's error: %q (%v)", last, err)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM audit_log WHERE target_id = $1 AND action = 'reject' AND after->>'comment' = 'too much'", r2); n != 1 {
		t.Errorf("the rejection is audited %d times with its comment", n)
	}
	if _, err := runs.RetryRun(ctx, ann, r2, true); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 20*time.Second, "the retried approval parks again", func() bool { return asking(r2) })
	if task, err := decide(bob, r2, "ok", true, ""); err != nil || !strings.HasPrefix(task.WaitReason, "approval by editor 1/2") {
		t.Errorf("bob's approval of the retry: %+v (%v)", task, err)
	}

	// Principals narrow who may decide, the role still applies.
	r3 := trigger(ann, "only-dan", nil)
	enginetest.WaitFor(t, 20*time.Second, "the approval parked", func() bool { return asking(r3) })
	if _, err := decide(cat, r3, "ok", true, ""); !denied(err, "approval.principals") {
		t.Errorf("cat, not among the principals, approved: %v", err)
	}
	if _, err := decide(dan, r3, "ok", true, ""); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "dan's approval ends the run", func() bool { return runStatus(t, pool, r3) == "succeeded" })

	// An event ann published, a child run of a run ann triggered: ann is
	// behind them, and may not decide on them; bob may.
	if _, err := event.Publish(ctx, pool, job.DefaultTenant, jobs.Shards(), event.Event{Type: "refund.asked", ID: "r-1", PublishedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	outer := trigger(ann, "outer", nil)
	for _, name := range []string{"on-refund", "inner"} {
		var id uuid.UUID
		enginetest.WaitFor(t, 30*time.Second, name+" asks", func() bool {
			return pool.QueryRow(ctx, `SELECT p.run_id FROM parked_steps AS p JOIN runs AS r ON r.id = p.run_id JOIN jobs AS j ON j.id = r.job_id
				WHERE j.name = $1 AND p.kind = 'approval'`, name).Scan(&id) == nil
		})
		if _, err := decide(ann, id, "ok", true, ""); !denied(err, "approval.separate") {
			t.Errorf("ann approved the run of %s she is behind: %v", name, err)
		}
		if _, err := decide(bob, id, "ok", true, ""); err != nil {
			t.Errorf("bob's approval of %s: %v", name, err)
		}
	}
	enginetest.WaitFor(t, 30*time.Second, "the outer run ends with its child", func() bool { return runStatus(t, pool, outer) == "succeeded" })

	// Its timeout skips it, and its all_success child; an all_done child runs.
	r4 := trigger(ann, "lapse", nil)
	enginetest.WaitFor(t, 30*time.Second, "the lapsed approval's run ends", func() bool { return runStatus(t, pool, r4) == "succeeded" })
	for step, want := range map[string]string{"ok": "skipped", "after": "skipped", "anyway": "succeeded"} {
		var got string
		if err := pool.QueryRow(ctx, "SELECT status FROM tasks WHERE run_id = $1 AND step = $2", r4, step).Scan(&got); err != nil || got != want {
			t.Errorf("step %s of the lapsed approval is %s, want %s (%v)", step, got, want, err)
		}
	}
	// Or fails it.
	r5 := trigger(ann, "lapse-fails", nil)
	enginetest.WaitFor(t, 30*time.Second, "the lapsed approval fails", func() bool { return runStatus(t, pool, r5) == "failed" })
	if err := pool.QueryRow(ctx, "SELECT last_error FROM tasks WHERE run_id = $1", r5).Scan(&last); err != nil || !strings.Contains(last, "approval: not decided before its timeout") {
		t.Errorf("the lapsed approval's error: %q (%v)", last, err)
	}
}
