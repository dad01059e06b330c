package run

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/store"
)

// specs caches job versions' parsed specs: a version never changes, and a
// DAG's spec is read once per attempt of each of its steps.
var specs = specCache{m: map[specKey]*parsedSpec{}}

// parsedSpec is a job version's spec with what finishing attempts asks of it.
type parsedSpec struct {
	*dag.JobSpec
	hasChildren map[string]bool // steps that some step needs
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
	k := specKey{job, version}
	c.mu.Lock()
	s, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	raw, err := store.New(db).JobVersionSpec(ctx, store.JobVersionSpecParams{JobID: job, Version: version})
	if err != nil {
		return nil, err
	}
	s = &parsedSpec{JobSpec: new(dag.JobSpec), hasChildren: map[string]bool{}}
	if err := json.Unmarshal(raw, s.JobSpec); err != nil {
		return nil, fmt.Errorf("job %s version %d: spec: %w", job, version, err)
	}
	for _, st := range s.Steps {
		for _, need := range st.Needs {
			s.hasChildren[need] = true
		}
	}
	c.mu.Lock()
	if len(c.m) >= maxCachedSpecs {
		clear(c.m) // simple and rare: versions are few and small in number
	}
	c.m[k] = s
	c.mu.Unlock()
	return s, nil
}
