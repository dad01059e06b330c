package webui

import (
	"net/http"

	"connectrpc.com/connect"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// clusterPage shows the scheduler nodes, the shards (owner, epoch, lag)
// and the worker processes; to an admin of the tenant, its quotas beside
// what it stores.
func (s *Server) clusterPage(w http.ResponseWriter, r *http.Request, v *view) error {
	res, err := s.clients.cluster.GetCluster(v.ctx, connect.NewRequest(&orreryv1.GetClusterRequest{}))
	if err != nil {
		return err
	}
	var maxLag float64
	for _, sh := range res.Msg.GetShards() {
		maxLag = max(maxLag, sh.GetLagSeconds())
	}
	data := map[string]any{"C": res.Msg, "MaxLag": maxLag, "CLI": "orrery cluster", "SystemAdmin": v.P.SystemAdmin}
	quota, err := s.clients.access.GetTenantQuota(v.ctx, connect.NewRequest(&orreryv1.GetTenantQuotaRequest{}))
	switch {
	case err == nil:
		q, u := quota.Msg.GetQuota(), quota.Msg.GetQuota().GetUsage()
		data["Tenant"] = q.GetTenant()
		data["Storage"] = []storageRow{
			{"jobs", "live jobs", u.GetJobs(), q.GetMaxJobs()},
			{"definition_bytes", "bytes of their definitions", u.GetDefinitionBytes(), q.GetMaxDefinitionBytes()},
			{"history_bytes", "bytes of their history (versions kept, audit rows of changes)", u.GetHistoryBytes(), q.GetMaxHistoryBytes()},
			{"runs", "runs kept", u.GetRuns(), q.GetMaxRuns()},
			{"tasks", "tasks of those runs", u.GetTasks(), q.GetMaxTasks()},
		}
	case connect.CodeOf(err) != connect.CodePermissionDenied: // not an admin: no section
		return err
	}
	s.render(w, r, v, http.StatusOK, "cluster", data)
	return nil
}

// storageRow is one storage quota of the caller's tenant, as the cluster
// page shows it (Limit 0: none).
type storageRow struct {
	Key, What   string
	Used, Limit int64
}

// Percent is how much of the quota is used, 0 to 100 (0 without one).
func (r storageRow) Percent() int64 {
	if r.Limit <= 0 {
		return 0
	}
	return min(100, r.Used*100/r.Limit)
}
