package run

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/store"
)

// Conditions: a step's `when` is decided when its task would be released,
// in the transaction that releases it (the parent's report, the run's
// insert for a root, a replay), so that no crash can leave a task half
// decided (docs/workflows.md).

// verdicts are conditions decided: the tasks to release, to skip and to
// fail (with why), and the runs whose job queues overlapping runs (for
// finishRun).
type verdicts struct {
	release    []candidate
	keyed      []keyedCandidate      // to release, held to their step keys (flow.go)
	rated      store.RateTasksParams // the rate limits' keys of those released
	skip, fail []verdict
	holdsRuns  map[uuid.UUID]bool
}

type verdict struct {
	cand candidate
	why  string
}

// runsOf reads what deciding candidates needs of their runs, and their
// job versions' specs: one query for the runs, the specs cached.
func (ap *applying) runsOf(ctx context.Context, cands []candidate) (map[uuid.UUID]store.ConditionRunsRow, map[specKey]*parsedSpec, error) {
	runIDs := make([]uuid.UUID, 0, len(cands))
	seen := make(map[uuid.UUID]bool, len(cands))
	for _, c := range cands {
		if !seen[c.run] {
			seen[c.run] = true
			runIDs = append(runIDs, c.run)
		}
	}
	runs, err := ap.q.ConditionRuns(ctx, runIDs)
	if err != nil {
		return nil, nil, err
	}
	byRun := make(map[uuid.UUID]store.ConditionRunsRow, len(runs))
	keys := make([]specKey, len(runs))
	for i, r := range runs {
		byRun[r.ID] = r
		keys[i] = specKey{r.JobID, r.JobVersion}
	}
	got, err := specs.getMany(ctx, ap.tx, keys)
	if err != nil {
		return nil, nil, err
	}
	return byRun, got, nil
}

// decideConditions evaluates the conditions of candidates (all
// conditional: a step with a condition, concurrency keys or a rate limit,
// decided at release), and the keys of those it releases (v.keyed: held to
// their concurrency keys; v.rated: their rate limits' keys), reading
// their runs and the outputs the conditions and keys read: two queries
// for the batch.
func (ap *applying) decideConditions(ctx context.Context, cands []candidate) (verdicts, error) {
	v := verdicts{holdsRuns: map[uuid.UUID]bool{}}
	byRun, got, err := ap.runsOf(ctx, cands)
	if err != nil {
		return v, err
	}
	type pending struct {
		cand  candidate
		run   store.ConditionRunsRow
		exprs *dag.StepExprs
	}
	var todo []pending
	var outputs outputsToRead
	spent := budgets{} // a run's conditions share one cost limit
	for _, c := range cands {
		r, ok := byRun[c.run]
		if !ok {
			return v, fmt.Errorf("task %s: run %s not found", c.ready.TaskID, c.run)
		}
		spec := got[specKey{r.JobID, r.JobVersion}]
		v.holdsRuns[c.run] = spec.HoldsRuns()
		if spec.exprsErr != nil {
			v.fail = append(v.fail, verdict{c, "when: the job version's expressions do not compile: " + spec.exprsErr.Error()})
			continue
		}
		x := spec.exprs.Step(c.step)
		if !x.HasCondition() && !x.HasKeys() { // a task written conditional by a newer version of this code
			v.release = append(v.release, c)
			continue
		}
		todo = append(todo, pending{c, r, x})
		outputs.add(c.run, x.WhenReads.Steps)
		outputs.add(c.run, x.KeysReads.Steps)
	}
	if err := outputs.load(ctx, ap.q); err != nil {
		return v, err
	}
	for _, p := range todo {
		reads := p.exprs.WhenReads.Steps
		if p.exprs.HasKeys() {
			reads = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(reads), p.exprs.KeysReads.Steps...))))
		}
		vars := outputs.vars(runOfRow(p.run, p.cand.ready.Attempt), reads, spent.of(p.run.ID))
		ok, err := p.exprs.Condition(vars)
		switch {
		case err != nil:
			v.fail = append(v.fail, verdict{p.cand, err.Error()})
			continue
		case !ok:
			v.skip = append(v.skip, verdict{p.cand, "skipped: its condition (when) is false"})
			continue
		case !p.exprs.HasKeys():
			v.release = append(v.release, p.cand)
			continue
		}
		keys, limits, err := p.exprs.Keys(vars)
		if err != nil {
			v.fail = append(v.fail, verdict{p.cand, err.Error()})
			continue
		}
		rateKey, rate, err := p.exprs.RateKey(vars)
		if err != nil {
			v.fail = append(v.fail, verdict{p.cand, err.Error()})
			continue
		}
		if rateKey != "" {
			// Admission spends its tokens: it never skips the wait.
			p.cand.ready.Limited = true
			v.rated.Ids = append(v.rated.Ids, p.cand.ready.TaskID)
			v.rated.Keys = append(v.rated.Keys, rateKey)
			v.rated.Limits = append(v.rated.Limits, int32(rate.Limit))
			v.rated.PerMs = append(v.rated.PerMs, rate.Per.Milliseconds())
		}
		if len(keys) == 0 {
			v.release = append(v.release, p.cand)
			continue
		}
		v.keyed = append(v.keyed, keyedCandidate{p.cand, keys, limits})
	}
	return v, nil
}
