package run

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/store"
)

// A run pins the resources each of its tasks asks for when it is created
// (docs/resources.md): a step's own, or its profile's as the profile is
// then; a later change of the profile changes later runs only.

type tenantProfile struct {
	tenant uuid.UUID
	name   string
}

// profilesOf reads the profiles the steps of the runs being written name
// (written[ids[i]]: runs[i] is written), in one statement, and none when
// no step names one. A profile a live job names cannot be deleted
// (job_profiles), so each is found; one that is not pins nothing.
func profilesOf(ctx context.Context, q *store.Queries, runs []New, written map[uuid.UUID]bool, ids []uuid.UUID) (map[tenantProfile]resources.Vector, error) {
	var p store.ProfilesOfTenantsParams
	for i, r := range runs {
		if !written[ids[i]] || !withTasks(r) {
			continue
		}
		for _, name := range r.Job.Spec.Profiles() {
			p.TenantIds, p.Names = append(p.TenantIds, r.Job.Tenant), append(p.Names, name)
		}
	}
	if len(p.Names) == 0 {
		return nil, nil
	}
	rows, err := q.ProfilesOfTenants(ctx, p)
	if err != nil {
		return nil, err
	}
	out := make(map[tenantProfile]resources.Vector, len(rows))
	for _, r := range rows {
		out[tenantProfile{r.TenantID, r.Name}] = resources.FromColumns(r.Cpu, r.Memory, r.Gpu, r.Custom)
	}
	return out, nil
}

// addResources appends a task's resources to the columns of InsertTasks.
func addResources(tp *store.InsertTasksParams, v resources.Vector) {
	tp.ResCpus = append(tp.ResCpus, v.CPU)
	tp.ResMemories = append(tp.ResMemories, v.Memory)
	tp.ResGpus = append(tp.ResGpus, v.GPU)
	custom := ""
	if len(v.Custom) > 0 {
		b, _ := json.Marshal(v.Custom)
		custom = string(b)
	}
	tp.ResCustoms = append(tp.ResCustoms, custom)
}

// Resources is what the task asks for, as its run pinned it.
func (t Task) Resources() resources.Vector {
	return resources.FromColumns(t.ResCpu, t.ResMemory, t.ResGpu, t.ResCustom)
}
