package run

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// Debounce (docs/flow-control.md, "Debounce"). A trigger of a job with
// spec.debounce (by hand, an event, an upstream run's end) does not start
// a run: Insert writes its run queued, with the key's value and the
// instant it starts (runs.debounce_key, debounce_at), or, when the job
// has such a run of the key already, gives that run the trigger's params
// and event and puts its start off (JoinDebounce), writing no run. The
// writers of a key decide one after the other under its advisory lock
// ("debounce/JOB/VALUE"). The scheduler of the run's shard starts it when
// due (FireDebounced): its job's overlap policy and concurrency keys
// decide it then, as they would a run written at that instant.

// ReasonDebounce starts the reason of a run waiting for its triggers to
// pause: "debounce key repo-x: starts 30s after its last trigger".
const ReasonDebounce = "debounce"

// debounces reports whether Insert debounces r: a trigger of a job with
// a debounce, not one that ignores the job's policies.
func debounces(r New) bool {
	if r.Job.Spec.Debounce == nil || r.NoDebounce || r.Status != lifecycle.RunPending {
		return false
	}
	switch r.Trigger {
	case lifecycle.TriggerManual, lifecycle.TriggerEvent, lifecycle.TriggerUpstream:
		return true
	}
	return false
}

// debounceReason is the reason of a debounced run of key (its value, ""
// for a job without one).
func debounceReason(d *dag.Debounce, key string) string {
	r := ReasonDebounce + ": starts " + shortDuration(d.Period.Duration) + " after the job's last trigger"
	if key != "" {
		r = ReasonDebounce + " key " + key + ": starts " + shortDuration(d.Period.Duration) + " after its last trigger"
	}
	if d.Wait() > 0 {
		r += ", at most " + shortDuration(d.Wait()) + " after its first"
	}
	return r
}

// debounced is what debounce made of a batch of new runs: those to write
// (the runs not debounced, and one for each key without a debounced run),
// and for each run of the batch where its id comes from.
type debounced struct {
	write  []New
	at     []int       // for each run of the batch: its index in write (-1: joined)
	joined []uuid.UUID // for each run of the batch: the debounced run it joined
	marks  []debounceMark
}

// debounceMark is a debounced run to write: write's index, its key's
// value, how many triggers it takes, its period.
type debounceMark struct {
	at     int
	key    string
	n      int
	period time.Duration
}

// debounce decides the debounced runs of the batch (see the file's doc):
// those of a key with a debounced run join it; the others of a key are
// one run, with the last one's params. A key that does not evaluate
// leaves its run failed, saying why. It returns nil when the batch has
// none.
func (ap *applying) debounce(ctx context.Context, runs []New) (*debounced, error) {
	var want []specKey
	for _, r := range runs {
		if debounces(r) {
			want = append(want, specKey{r.Job.ID, r.Job.Version})
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	got, err := specs.getMany(ctx, ap.tx, want)
	if err != nil {
		return nil, err
	}
	type group struct {
		job     uuid.UUID
		key     string
		members []int
		open    uuid.UUID // the job's debounced run of the key, if any
	}
	var groups []*group
	byKey := map[string]*group{}
	for i := range runs {
		r := &runs[i]
		if !debounces(*r) {
			continue
		}
		if r.Params == nil && len(r.Job.Spec.Params) > 0 { // (an event's, an upstream's: the defaults)
			p, err := r.Job.Spec.RunParams(nil)
			if err != nil || r.Job.Spec.RequiredParam() != "" {
				continue // skipped by insert, saying why (fillParams)
			}
			r.Params = p
		}
		s := got[specKey{r.Job.ID, r.Job.Version}]
		if s.debounceErr != nil {
			r.Status, r.Reason = lifecycle.RunFailed, "spec.debounce: "+s.debounceErr.Error()
			continue
		}
		v, err := s.debounce.Value(keyVars(*r))
		if err != nil {
			r.Status, r.Reason = lifecycle.RunFailed, err.Error()
			continue
		}
		lock := "debounce/" + r.Job.ID.String() + "/" + v
		g := byKey[lock]
		if g == nil {
			g = &group{job: r.Job.ID, key: v}
			byKey[lock] = g
			groups = append(groups, g)
		}
		g.members = append(g.members, i)
	}
	if len(groups) == 0 {
		return nil, nil // (some failed: written so)
	}
	locks := make([]string, 0, len(byKey))
	keysOf := map[uuid.UUID][]string{}
	for lock, g := range byKey {
		locks = append(locks, lock)
		keysOf[g.job] = append(keysOf[g.job], g.key)
	}
	if err := ap.q.LockConcurrencyKeys(ctx, locks); err != nil {
		return nil, err
	}
	jobs := make([]uuid.UUID, 0, len(keysOf))
	for j := range keysOf {
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	for _, j := range jobs {
		open, err := ap.q.OpenDebounces(ctx, store.OpenDebouncesParams{JobID: j, Keys: keysOf[j]})
		if err != nil {
			return nil, err
		}
		for _, o := range open {
			byKey["debounce/"+j.String()+"/"+o.DebounceKey].open = o.ID
		}
	}
	d := &debounced{at: make([]int, len(runs)), joined: make([]uuid.UUID, len(runs))}
	member := map[int]*group{}
	for _, g := range groups {
		for _, i := range g.members {
			member[i] = g
		}
	}
	written := map[*group]int{}
	for i := range runs {
		g := member[i]
		switch {
		case g == nil:
			d.at[i] = len(d.write)
			d.write = append(d.write, runs[i])
		case g.open == uuid.Nil && i == g.members[len(g.members)-1]: // the group's last: the one written
			r := runs[i]
			r.Status, r.Reason = lifecycle.RunQueued, debounceReason(r.Job.Spec.Debounce, g.key)
			written[g] = len(d.write)
			d.marks = append(d.marks, debounceMark{at: len(d.write), key: g.key, n: len(g.members), period: r.Job.Spec.Debounce.Period.Duration})
			d.write = append(d.write, r)
		}
	}
	for _, g := range groups {
		r := runs[g.members[len(g.members)-1]]
		reason := debounceReason(r.Job.Spec.Debounce, g.key)
		for _, i := range g.members {
			runs[i].Status, runs[i].Reason = lifecycle.RunQueued, reason
			d.at[i] = -1
			if g.open == uuid.Nil {
				d.at[i] = written[g]
			} else {
				d.joined[i] = g.open
			}
		}
		if g.open == uuid.Nil {
			continue
		}
		got, err := ap.q.JoinDebounce(ctx, store.JoinDebounceParams{ID: g.open, Params: string(r.Params), Event: string(r.Event), EventID: r.EventID,
			Upstream: string(r.Upstream), Trigger: string(r.Trigger), RootRunID: r.Root, Depth: int32(r.Depth),
			TriggeredBy: r.By, Joined: int32(len(g.members)), Period: interval(r.Job.Spec.Debounce.Period.Duration),
			MaxWait: interval(r.Job.Spec.Debounce.Wait())})
		if err != nil {
			return nil, err
		}
		for _, i := range g.members {
			runs[i].Debounced = &Debounced{Key: g.key, At: got.DebounceAt, Count: int(got.DebounceCount), Joined: true,
				ScheduledFor: got.ScheduledFor, CreatedAt: got.CreatedAt}
		}
	}
	return d, nil
}

// ids are the ids of the batch's runs, given those of write as Insert
// wrote them; the new debounced runs written are marked so.
func (d *debounced) ids(ctx context.Context, ap *applying, runs []New, written []uuid.UUID) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(runs))
	for i := range runs {
		if j := d.at[i]; j >= 0 {
			ids[i] = written[j]
			runs[i].Status, runs[i].Reason = d.write[j].Status, d.write[j].Reason
		} else {
			ids[i] = d.joined[i]
		}
	}
	var p store.MarkDebouncedParams
	key := map[uuid.UUID]string{}
	for _, m := range d.marks {
		if written[m.at] == uuid.Nil {
			continue // (its instant has a run already)
		}
		p.Ids, p.Keys, p.Ns = append(p.Ids, written[m.at]), append(p.Keys, m.key), append(p.Ns, int32(m.n))
		p.Periods = append(p.Periods, interval(m.period))
		key[written[m.at]] = m.key
	}
	if len(p.Ids) == 0 {
		return ids, nil
	}
	marked, err := ap.q.MarkDebounced(ctx, p)
	if err != nil {
		return nil, err
	}
	of := make(map[uuid.UUID]*Debounced, len(marked))
	for _, m := range marked {
		of[m.ID] = &Debounced{Key: key[m.ID], At: m.DebounceAt, Count: int(m.DebounceCount)}
	}
	for i := range runs {
		if m := of[ids[i]]; m != nil {
			runs[i].Debounced = m
		}
	}
	return ids, nil
}

func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// FireDebounced starts, in tx, up to batch of the shards' debounced runs
// that are due (the caller fences the shards), each as its job's overlap
// policy and concurrency keys decide at this instant: pending (its first
// steps released), queued (for its keys or the run before it), or
// cancelled, the reason naming why. It locks their jobs' schedule rows,
// in id order, before the runs (the order of a firing and of a trigger,
// whose overlap decisions it serializes with). It returns the runs it
// read as due (also when it fails: the caller sets aside one that fails
// alone).
func (a *Applier) FireDebounced(ctx context.Context, tx pgx.Tx, shards []int32, batch int32) ([]uuid.UUID, error) {
	ap := a.in(tx)
	due, err := ap.q.DueDebounces(ctx, store.DueDebouncesParams{Shards: shards, Batch: batch})
	if err != nil || len(due) == 0 {
		return nil, err
	}
	ids := make([]uuid.UUID, len(due))
	jobs := make([]uuid.UUID, 0, len(due))
	for i, r := range due {
		ids[i] = r.ID
		if !slices.Contains(jobs, r.JobID) {
			jobs = append(jobs, r.JobID)
		}
	}
	if err := ap.q.LockSchedules(ctx, jobs); err != nil {
		return ids, err
	}
	rows, err := ap.q.LockDebounced(ctx, ids)
	if err != nil {
		return ids, err
	}
	for _, r := range rows {
		if err := ap.fireDebounced(ctx, r); err != nil {
			return ids, err
		}
	}
	return ids, nil
}

// ReasonDebouncedJobDeleted is the reason of a debounced run whose job was
// deleted while it waited.
const ReasonDebouncedJobDeleted = "its job was deleted while its debounce waited"

// fireDebounced starts one debounced run (FireDebounced); one whose job
// was deleted while it waited is cancelled. (A paused job's waits for it
// to resume: DueDebounces leaves it.)
func (ap *applying) fireDebounced(ctx context.Context, r store.LockDebouncedRow) error {
	if r.JobStatus == "deleted" {
		if err := ap.q.StartDebounced(ctx, store.StartDebouncedParams{Ids: []uuid.UUID{r.ID}, Statuses: []string{string(lifecycle.RunQueued)},
			Reasons: []string{ReasonDebouncedJobDeleted}, ConcurrencyKeys: []string{""}}); err != nil {
			return err
		}
		_, err := ap.Cancel(ctx, ap.tx, []uuid.UUID{r.ID}, ReasonDebouncedJobDeleted)
		return err
	}
	s, err := specs.get(ctx, ap.tx, r.JobID, r.JobVersion)
	if err != nil {
		return err
	}
	n := []New{{Job: JobRef{ID: r.JobID, Tenant: r.TenantID, Version: r.JobVersion, Shard: int(r.Shard), Spec: s.JobSpec},
		At: r.ScheduledFor, Trigger: r.Trigger, Status: lifecycle.RunPending, Params: r.Params, Event: r.Event}}
	d, previous, err := weighOverlap(ctx, ap.q, r.JobID, s.Overlap) // (previous: the active runs it cancels)
	if err != nil {
		return err
	}
	n[0].Status, n[0].Reason = d.Status, d.Reason
	keys, cancelFor, err := ap.decideKeys(ctx, n)
	if err != nil {
		return err
	}
	p := store.StartDebouncedParams{Ids: []uuid.UUID{r.ID}, Statuses: []string{string(n[0].Status)}, Reasons: []string{n[0].Reason}, ConcurrencyKeys: []string{""}}
	if keys != nil {
		p.ConcurrencyKeys[0] = keys[0]
	}
	if !withTasks(n[0]) {
		p.Statuses[0] = string(lifecycle.RunQueued) // cancelled below, its tasks with it
	}
	if err := ap.q.StartDebounced(ctx, p); err != nil {
		return err
	}
	if len(previous) > 0 {
		if _, err := ap.Cancel(ctx, ap.tx, previous, lifecycle.ReasonCancelledByTrigger); err != nil {
			return err
		}
	}
	if cancelFor != nil && len(cancelFor[0]) > 0 {
		if _, err := ap.Cancel(ctx, ap.tx, cancelFor[0], "concurrency: cancel_running (a newer run of its key)"); err != nil {
			return err
		}
	}
	switch {
	case n[0].Status == lifecycle.RunPending:
		return ap.releaseRoots(ctx, r.ID)
	case !withTasks(n[0]):
		_, err := ap.Cancel(ctx, ap.tx, []uuid.UUID{r.ID}, n[0].Reason)
		return err
	}
	return nil
}

// weighOverlap decides a new run of a job by its overlap policy against
// the job's active runs (allow reads none): its status and reason, and
// the active runs cancel_previous cancels (the caller cancels them).
func weighOverlap(ctx context.Context, q *store.Queries, jobID uuid.UUID, policy dag.OverlapPolicy) (lifecycle.OverlapDecision, []uuid.UUID, error) {
	if policy == dag.OverlapAllow {
		return lifecycle.OverlapDecision{Status: lifecycle.RunPending}, nil, nil
	}
	active, err := q.ActiveRuns(ctx, []uuid.UUID{jobID})
	if err != nil {
		return lifecycle.OverlapDecision{}, nil, err
	}
	statuses := make([]lifecycle.RunStatus, len(active))
	for i, a := range active {
		statuses[i] = a.Status
	}
	d := lifecycle.NewOverlap(policy, statuses).Next()
	var previous []uuid.UUID
	if d.CancelPrevious {
		for _, a := range active {
			previous = append(previous, a.ID)
		}
	}
	return d, previous, nil
}
