package run

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/expr"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// Job-level concurrency keys (docs/flow-control.md). A run of a job with
// spec.concurrency holds its keys (runs.concurrency_keys, each
// JOB/ENTRY/VALUE) while it is pending or running. Insert, which every
// run's creation goes through, decides each new run under the keys'
// advisory locks (LockConcurrencyKeys), from the holders counted then
// (KeyHolders): pending when every key has room, else what the first full
// key's on_limit says. A run's end promotes the job's runs queued for
// their keys that now fit (promoteKeyed), under the same locks.

// keySep joins a run's keys into the one text InsertRuns splits.
const keySep = "\x1e"

// keyOf is a key as runs.concurrency_keys holds it.
func keyOf(job uuid.UUID, entry int, value string) string {
	return fmt.Sprintf("%s/%d/%s", job, entry, value)
}

// ReasonConcurrencyQueue is the start of the reason of a run queued for a
// key at its limit: "concurrency key customer=42 1/1".
const ReasonConcurrencyQueue = "concurrency key"

// decideKeys evaluates the keys of the new runs of jobs with concurrency
// keys and decides them (see the file's doc), in the caller's
// transaction, before the runs are written: it sets each run's Status and
// Reason, and returns each run's keys as InsertRuns takes them ("" for
// none) and, by new run, the runs already written that cancel_running
// cancels to make room for it (the caller cancels those of the new runs
// it wrote).
func (ap *applying) decideKeys(ctx context.Context, runs []New) (keys []string, cancelFor [][]uuid.UUID, err error) {
	var want []specKey
	for _, r := range runs {
		if len(r.Job.Spec.Concurrency) > 0 && r.Status == lifecycle.RunPending {
			want = append(want, specKey{r.Job.ID, r.Job.Version})
		}
	}
	if len(want) == 0 {
		return nil, nil, nil
	}
	got, err := specs.getMany(ctx, ap.tx, want)
	if err != nil {
		return nil, nil, err
	}
	keys = make([]string, len(runs))
	cancelFor = make([][]uuid.UUID, len(runs))
	var cancel []uuid.UUID // every holder cancelled, once
	values := make([][]string, len(runs))
	var all []string
	for i := range runs {
		r := &runs[i]
		if len(r.Job.Spec.Concurrency) == 0 || r.Status != lifecycle.RunPending {
			continue
		}
		s := got[specKey{r.Job.ID, r.Job.Version}]
		if s.keysErr != nil {
			r.Status, r.Reason = lifecycle.RunFailed, "spec.concurrency: "+s.keysErr.Error()
			continue
		}
		v, err := s.keys.Values(keyVars(*r))
		if err != nil {
			r.Status, r.Reason = lifecycle.RunFailed, err.Error()
			continue
		}
		for e, val := range v {
			values[i] = append(values[i], keyOf(r.Job.ID, e, val))
		}
		keys[i] = strings.Join(values[i], keySep)
		all = append(all, values[i]...)
	}
	if len(all) == 0 {
		return keys, cancelFor, nil
	}
	written, err := ap.holders(ctx, all)
	if err != nil {
		return nil, nil, err
	}
	// A key's holders: those written (less those this batch cancels that
	// are known to hold it) and this batch's runs still pending.
	gone := map[string]map[uuid.UUID]bool{} // written holders of each key cancelled, known to hold it
	holders := map[string][]int{}           // the runs of this batch holding each key (their index)
	held := func(k string) int {
		n := written[k] - len(gone[k])
		for _, j := range holders[k] {
			if runs[j].Status == lifecycle.RunPending {
				n++
			}
		}
		return n
	}
	for i := range runs {
		r := &runs[i]
		if values[i] == nil || r.Status != lifecycle.RunPending {
			continue
		}
		limits := r.Job.Spec.Concurrency
		full := -1
		for e, k := range values[i] {
			if held(k) >= limits[e].Limit {
				full = e
				break
			}
		}
		if full >= 0 {
			k, lim := values[i][full], limits[full]
			switch lim.Action() {
			case dag.OnLimitQueue:
				r.Status, r.Reason = lifecycle.RunQueued, fmt.Sprintf("%s %s %d/%d", ReasonConcurrencyQueue, valueOf(k), held(k), lim.Limit)
				continue
			case dag.OnLimitCancelNewest:
				r.Status, r.Reason = lifecycle.RunCancelled, fmt.Sprintf("concurrency: cancel_newest (key %s at its limit %d/%d)", valueOf(k), held(k), lim.Limit)
				continue
			case dag.OnLimitCancelRunning:
				// Room for this run in each of its full keys: the oldest
				// holders go, those written before first, then this
				// batch's earliest.
				for e, k := range values[i] {
					over := held(k) - limits[e].Limit + 1
					if over <= 0 {
						continue
					}
					if gone[k] == nil {
						gone[k] = map[uuid.UUID]bool{}
					}
					// The oldest written holders, past those already
					// cancelled (by this key or another): each one not yet
					// counted gone from this key makes room once.
					old, err := ap.q.OldestHolders(ctx, store.OldestHoldersParams{Key: k, N: int32(over + len(cancel))})
					if err != nil {
						return nil, nil, err
					}
					for _, id := range old {
						if over <= 0 {
							break
						}
						if gone[k][id] {
							continue
						}
						gone[k][id] = true
						over--
						if !slices.Contains(cancel, id) {
							cancel = append(cancel, id)
							cancelFor[i] = append(cancelFor[i], id)
						}
					}
					for _, j := range holders[k] {
						if over <= 0 {
							break
						}
						if runs[j].Status == lifecycle.RunPending {
							runs[j].Status, runs[j].Reason = lifecycle.RunCancelled, "concurrency: cancel_running (a newer run of key "+valueOf(k)+")"
							over--
						}
					}
				}
			}
		}
		for _, k := range values[i] {
			holders[k] = append(holders[k], i)
		}
	}
	return keys, cancelFor, nil
}

// holders locks the keys and counts the runs holding each.
func (ap *applying) holders(ctx context.Context, keys []string) (map[string]int, error) {
	if err := ap.q.LockConcurrencyKeys(ctx, keys); err != nil {
		return nil, err
	}
	rows, err := ap.q.KeyHolders(ctx, keys)
	if err != nil {
		return nil, err
	}
	held := make(map[string]int, len(rows))
	for _, r := range rows {
		held[r.Key] = int(r.N)
	}
	return held, nil
}

// parseKey splits a stored key JOB/ENTRY/VALUE into its entry's position
// in spec.concurrency (-1 when it does not read as one) and its value.
func parseKey(key string) (entry int, value string) {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) != 3 {
		return -1, parts[len(parts)-1]
	}
	e, err := strconv.Atoi(parts[1])
	if err != nil {
		e = -1
	}
	return e, parts[2]
}

// valueOf is a key's value (JOB/ENTRY/VALUE's VALUE).
func valueOf(key string) string {
	_, v := parseKey(key)
	return v
}

// keyVars are what a run's keys read as it is created: its params, its
// event, its instant and trigger.
func keyVars(r New) expr.Vars {
	return expr.Vars{ScheduledFor: r.At, Trigger: string(r.Trigger), Params: jsonObject(r.Params), Event: jsonObject(r.Event)}
}

// maxPromoted bounds the queued runs one run's end looks at.
const maxPromoted = 100

// promoteKeyed starts the runs queued for their keys that now fit (the
// oldest first, each counted as it starts), under the keys' locks: those
// queued for a key of the run that ended (ended, whose keys are given),
// or, without one (the reaper's look), the job's oldest. The ended run's
// keys are locked, waiting, before the queue is read, so that a run
// queued meanwhile for one of them (by an Insert that holds the lock) is
// read once it committed. The queued runs' other keys, and every key in
// the reaper's look, are only tried (their locks would come out of key
// order): a run with a key another transaction holds stays queued, for
// the reaper's next look. It returns how many it started, and whether any
// run was queued for keys (if not, the caller promotes as overlap: queue
// does).
func (ap *applying) promoteKeyed(ctx context.Context, jobID uuid.UUID, ended []string) (int, bool, error) {
	type queuedRun struct {
		id      uuid.UUID
		version specKey
		keys    []string
	}
	var queued []queuedRun
	locked := map[string]bool{}
	if len(ended) > 0 {
		if err := ap.q.LockConcurrencyKeys(ctx, ended); err != nil {
			return 0, false, err
		}
		for _, k := range ended {
			locked[k] = true
		}
		rows, err := ap.q.QueuedForKeys(ctx, store.QueuedForKeysParams{Keys: ended, N: maxPromoted})
		if err != nil {
			return 0, false, err
		}
		for _, r := range rows {
			queued = append(queued, queuedRun{r.ID, specKey{r.JobID, r.JobVersion}, r.ConcurrencyKeys})
		}
		if len(queued) == 0 {
			return 0, true, nil
		}
	} else {
		rows, err := ap.q.QueuedKeyedRuns(ctx, store.QueuedKeyedRunsParams{JobID: jobID, N: maxPromoted})
		if err != nil || len(rows) == 0 {
			return 0, false, err
		}
		for _, r := range rows {
			queued = append(queued, queuedRun{r.ID, specKey{jobID, r.JobVersion}, r.ConcurrencyKeys})
		}
	}
	var others []string
	versions := make([]specKey, len(queued))
	for i, q := range queued {
		for _, k := range q.keys {
			if !locked[k] && !slices.Contains(others, k) {
				others = append(others, k)
			}
		}
		versions[i] = q.version
	}
	if len(others) > 0 {
		got, err := ap.q.TryLockKeys(ctx, others)
		if err != nil {
			return 0, true, err
		}
		for _, k := range got {
			locked[k] = true
		}
	}
	rows, err := ap.q.KeyHolders(ctx, slices.Collect(maps.Keys(locked)))
	if err != nil {
		return 0, true, err
	}
	held := make(map[string]int, len(rows))
	for _, r := range rows {
		held[r.Key] = int(r.N)
	}
	got, err := specs.getMany(ctx, ap.tx, versions)
	if err != nil {
		return 0, true, err
	}
	var start []uuid.UUID
	for _, q := range queued {
		fits := true
		for _, k := range q.keys {
			if !locked[k] || held[k] >= limitOf(got[q.version], k) {
				fits = false
				break
			}
		}
		if !fits {
			continue
		}
		for _, k := range q.keys {
			held[k]++
		}
		start = append(start, q.id)
	}
	if len(start) == 0 {
		return 0, true, nil
	}
	started, err := ap.q.PromoteRuns(ctx, start)
	if err != nil {
		return 0, true, err
	}
	return len(started), true, ap.releaseRoots(ctx, started...)
}

// fullKey says, under their keys' locks, whether finished runs about to
// run again (a retry, a rerun, a replay) find room in their concurrency
// keys: a run holds its keys again once it runs, counted as a new run
// would be. It returns the first full key's reason ("concurrency key
// customer=42 1/1"), or "" when they all fit.
func (ap *applying) fullKey(ctx context.Context, runs []uuid.UUID) (string, error) {
	rows, err := ap.q.RunsKeys(ctx, runs)
	if err != nil || len(rows) == 0 {
		return "", err
	}
	var all []string
	versions := make([]specKey, len(rows))
	for i, r := range rows {
		all = append(all, r.ConcurrencyKeys...)
		versions[i] = specKey{r.JobID, r.JobVersion}
	}
	held, err := ap.holders(ctx, all)
	if err != nil {
		return "", err
	}
	got, err := specs.getMany(ctx, ap.tx, versions)
	if err != nil {
		return "", err
	}
	for i, r := range rows {
		for _, k := range r.ConcurrencyKeys {
			if lim := limitOf(got[versions[i]], k); held[k] >= lim {
				return fmt.Sprintf("%s %s %d/%d", ReasonConcurrencyQueue, valueOf(k), held[k], lim), nil
			}
		}
		for _, k := range r.ConcurrencyKeys {
			held[k]++
		}
	}
	return "", nil
}

// limitOf is the limit of key (JOB/ENTRY/VALUE) in the job's spec s (1
// when the entry is gone: a version that dropped it).
func limitOf(s *parsedSpec, key string) int {
	if e, _ := parseKey(key); e >= 0 && e < len(s.Concurrency) {
		return s.Concurrency[e].Limit
	}
	return 1
}
