package run_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/run"
)

// Step keys' promotion, in one transaction (outside InRawTx the
// promotion runs at once): released tasks are held and the first fits; a
// held task whose other key is full moves to wait on it, and the task
// behind it on the first key is released by the same promotion; a
// holder's cancel releases the next one, in line.
func TestStepKeysPromoteFirstInFirstOut(t *testing.T) {
	t.Parallel()
	x := newInTx(t)
	xk, gk := "x-"+t.Name(), "g-"+t.Name()
	keyed := func(keys ...string) dag.Step {
		s := step("only")
		for _, k := range keys {
			s.Concurrency = append(s.Concurrency, dag.ConcurrencyLimit{Key: k, Limit: 1})
		}
		return s
	}
	state := func(r uuid.UUID) string {
		t.Helper()
		return x.text(`SELECT status || ' ' || COALESCE(flow_wait, '-') FROM tasks WHERE run_id = $1`, r)
	}
	expect := func(when string, want map[uuid.UUID]string) {
		t.Helper()
		for r, w := range want {
			if got := state(r); got != w {
				t.Errorf("%s: a task is %q, want %q", when, got, w)
			}
		}
	}
	g := x.run(keyed(gk))      // holds g
	a := x.run(keyed(xk))      // holds x
	s1 := x.run(keyed(xk, gk)) // held on x
	s2 := x.run(keyed(xk))     // held on x, behind s1
	expect("released", map[uuid.UUID]string{g: "queued -", a: "queued -", s1: "waiting " + xk, s2: "waiting " + xk})

	x.finish(report(x.start(a, "only"), true))
	expect("x's holder ended", map[uuid.UUID]string{s1: "waiting " + gk, s2: "queued -"})

	if _, err := x.apply.Cancel(x.ctx, x.tx, []uuid.UUID{g}, "test"); err != nil {
		t.Fatal(err)
	}
	expect("g's holder cancelled", map[uuid.UUID]string{s1: "waiting " + xk}) // g is free, x is s2's
	s3 := x.run(keyed(xk))
	expect("a later release", map[uuid.UUID]string{s3: "waiting " + xk})
	if _, err := x.apply.Cancel(x.ctx, x.tx, []uuid.UUID{s2}, "test"); err != nil {
		t.Fatal(err)
	}
	expect("x's holder cancelled", map[uuid.UUID]string{s1: "queued -", s3: "waiting " + xk})
	if _, err := x.apply.Cancel(x.ctx, x.tx, []uuid.UUID{s1}, "test"); err != nil {
		t.Fatal(err)
	}
	expect("the first in line cancelled", map[uuid.UUID]string{s3: "queued -"})
}

// A job's key with cancel_running, two new runs of it in one Insert: the
// holder written before goes, the first new run makes room for the
// second, and the key's limit of 1 holds (the second new run does not
// count the holder the first cancelled as room again).
func TestCancelRunningWithinOneInsert(t *testing.T) {
	t.Parallel()
	x := newInTx(t)
	j := x.job(dag.JobSpec{Steps: []dag.Step{step("only")},
		Concurrency: []dag.ConcurrencyLimit{{Key: "one", Limit: 1, OnLimit: dag.OnLimitCancelRunning}}})
	a := x.insert(j, 1)[0]
	b := x.insert(j, 2)
	got := map[string]string{}
	for name, id := range map[string]uuid.UUID{"a": a, "b1": b[0], "b2": b[1]} {
		got[name] = x.text(`SELECT status FROM runs WHERE id = $1`, id)
	}
	if got["a"] != "cancelled" || got["b1"] != "cancelled" || got["b2"] != "pending" {
		t.Errorf("runs %v, want a and b1 cancelled, b2 pending", got)
	}
	if n := x.text(`SELECT count(*)::text FROM runs WHERE job_id = $1 AND status IN ('pending', 'running')`, j.ID); n != "1" {
		t.Errorf("%s runs hold the key of limit 1", n)
	}
}

// The reaper's look at held-back runs goes round the jobs: a job whose
// queued run waits on a full key does not keep the look, a batch of one
// job a pass, from a job whose queued run has room (its holder ended
// without promoting it).
func TestPromoteStrandedGoesRoundTheJobs(t *testing.T) {
	t.Parallel()
	x := newInTx(t)
	keyed := func() run.JobRef {
		return x.job(dag.JobSpec{Steps: []dag.Step{step("only")},
			Concurrency: []dag.ConcurrencyLimit{{Key: "one", Limit: 1}}})
	}
	full, free := keyed(), keyed() // full's id sorts first (UUIDv7)
	x.insert(full, 2)
	freed := x.insert(free, 2)
	x.exec(`UPDATE runs SET status = 'succeeded', finished_at = now() WHERE id = $1`, freed[0]) // its end promoted nothing
	x.exec(`UPDATE tasks SET status = 'succeeded' WHERE run_id = $1`, freed[0])
	after := uuid.Nil
	for pass := range 3 {
		next, n, err := x.apply.PromoteStranded(x.ctx, x.tx, after, 1)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			if pass != 1 {
				t.Errorf("the freed key's run started in pass %d, want the second", pass)
			}
			break
		}
		if pass == 2 {
			t.Fatal("three passes of one job each never started the run whose key has room")
		}
		after = next
	}
	if s := x.text(`SELECT status FROM runs WHERE id = $1`, freed[1]); s != "pending" {
		t.Errorf("the queued run of the freed key is %s, want pending", s)
	}
}
