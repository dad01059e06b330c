package job

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/forecast"
	"github.com/orrery-dev/orrery/internal/store"
)

// CapacityFacts is what a capacity forecast of the actor's jobs reads
// beside them: each job's step lengths (the median of each step's
// attempts over its last 50 runs), the tenant's profiles, and what each
// queue's live workers have.
type CapacityFacts struct {
	Lengths  map[uuid.UUID]map[string]time.Duration
	Profiles map[string]resources.Vector
	Fleet    map[string]forecast.QueueCapacity
}

// ReadCapacityFacts reads the CapacityFacts of the actor's jobs ids.
func (s *Service) ReadCapacityFacts(ctx context.Context, a Actor, ids []uuid.UUID) (*CapacityFacts, error) {
	q := store.New(s.pool)
	f := &CapacityFacts{Lengths: map[uuid.UUID]map[string]time.Duration{}, Fleet: map[string]forecast.QueueCapacity{}}
	medians, err := q.StepMedians(ctx, store.StepMediansParams{JobIds: ids, TenantID: a.Tenant})
	if err != nil {
		return nil, err
	}
	for _, m := range medians {
		if f.Lengths[m.JobID] == nil {
			f.Lengths[m.JobID] = map[string]time.Duration{}
		}
		f.Lengths[m.JobID][m.Step] = time.Duration(m.Seconds * float64(time.Second))
	}
	profiles, err := q.ListProfiles(ctx, a.Tenant)
	if err != nil {
		return nil, err
	}
	f.Profiles = byName(profiles)
	caps, err := q.LiveQueueCapacities(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range caps {
		f.Fleet[c.Queue] = forecast.QueueCapacity{Capacity: resources.FromColumns(c.Cpu, c.Memory, c.Gpu, c.Custom), Unbounded: c.Undeclared > 0}
	}
	return f, nil
}
