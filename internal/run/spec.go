package run

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/store"
)

// specs caches job versions' parsed specs: a version never changes, and a
// DAG's spec is read once per attempt of each of its steps.
var specs = specCache{m: map[specKey]*parsedSpec{}}

// parsedSpec is a job version's spec with what finishing attempts asks of it.
type parsedSpec struct {
	*dag.JobSpec
	hasChildren map[string]bool      // steps that some step needs
	exprs       *dag.Exprs           // the steps' expressions, compiled
	exprsErr    error                // why they do not compile (a spec older than a change of the language)
	jittered    *schedule.Schedule   // the schedule, when it has a jitter (nil: runs fire at their instants)
	keys        *dag.ConcurrencyKeys // its concurrency keys, compiled (nil: none)
	keysErr     error                // why they do not compile
	debounce    *dag.DebounceKey     // its debounce key, compiled (nil: none, or plain text)
	debounceErr error                // why it does not compile
}

// stepIndex is the index in Steps of a task's step (an item's, STEP[i],
// is its fan-out's), -1 when the version has none.
func (s *parsedSpec) stepIndex(task string) int {
	name, _, _ := dag.StepOfItem(task)
	for i := range s.Steps {
		if s.Steps[i].Name == name {
			return i
		}
	}
	return -1
}

// fireOf is when a run of the job (namespace/name) fired for instant at:
// at plus its jitter.
func (s *parsedSpec) fireOf(namespace, name string, at time.Time) time.Time {
	if s.jittered == nil {
		return at
	}
	return s.jittered.For(namespace, name).Fire(at)
}

type specKey struct {
	job     uuid.UUID
	version int64
}

type specCache struct {
	mu sync.Mutex
	m  map[specKey]*parsedSpec
}

const maxCachedSpecs = 4096

func (c *specCache) get(ctx context.Context, db store.DBTX, job uuid.UUID, version int64) (*parsedSpec, error) {
	got, err := c.getMany(ctx, db, []specKey{{job, version}})
	if err != nil {
		return nil, err
	}
	return got[specKey{job, version}], nil
}

// getMany returns the specs of the given versions, reading the ones not
// cached yet in one query.
func (c *specCache) getMany(ctx context.Context, db store.DBTX, keys []specKey) (map[specKey]*parsedSpec, error) {
	out := make(map[specKey]*parsedSpec, len(keys))
	var missing store.JobVersionSpecsParams
	c.mu.Lock()
	for _, k := range keys {
		if s, ok := c.m[k]; ok {
			out[k] = s
		} else if _, asked := out[k]; !asked {
			out[k] = nil
			missing.JobIds = append(missing.JobIds, k.job)
			missing.Versions = append(missing.Versions, k.version)
		}
	}
	c.mu.Unlock()
	if len(missing.JobIds) == 0 {
		return out, nil
	}
	rows, err := store.New(db).JobVersionSpecs(ctx, missing)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		k := specKey{r.JobID, r.Version}
		s := &parsedSpec{JobSpec: new(dag.JobSpec), hasChildren: map[string]bool{}}
		if err := json.Unmarshal(r.Spec, s.JobSpec); err != nil {
			return nil, fmt.Errorf("job %s version %d: spec: %w", r.JobID, r.Version, err)
		}
		for _, st := range s.Steps {
			for _, need := range st.Needs {
				s.hasChildren[need] = true
			}
		}
		s.exprs, s.exprsErr = compileExprs(s.JobSpec)
		if k, es := dag.CompileConcurrencyKeys(s.JobSpec); len(es) > 0 {
			s.keysErr = es
		} else {
			s.keys = k
		}
		if k, es := dag.CompileDebounceKey(s.JobSpec); len(es) > 0 {
			s.debounceErr = es
		} else {
			s.debounce = k
		}
		if sched, err := schedule.Parse(s.Schedule); err == nil && sched.Jitter() > 0 {
			s.jittered = sched
		}
		out[k] = s
	}
	c.mu.Lock()
	if len(c.m)+len(rows) > maxCachedSpecs {
		clear(c.m) // simple and rare: a node sees few versions at once
	}
	for _, r := range rows {
		k := specKey{r.JobID, r.Version}
		c.m[k] = out[k]
	}
	c.mu.Unlock()
	for k, s := range out {
		if s == nil {
			return nil, fmt.Errorf("job %s version %d: no such version", k.job, k.version)
		}
	}
	return out, nil
}

// compileExprs compiles a stored version's expressions; an error (a
// version written before a change of the language) refuses its steps'
// attempts, saying why, and a panic is such an error, not a dead worker.
func compileExprs(spec *dag.JobSpec) (x *dag.Exprs, err error) {
	defer func() {
		if p := recover(); p != nil {
			x, err = nil, fmt.Errorf("compiling the expressions panicked: %v", p)
		}
	}()
	x, es := dag.CompileExprs(spec)
	if len(es) > 0 {
		return nil, es
	}
	return x, nil
}
