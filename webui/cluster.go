package webui

import (
	"net/http"

	"connectrpc.com/connect"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// clusterPage shows the scheduler nodes, the shards (owner, epoch, lag)
// and the worker processes.
func (s *Server) clusterPage(w http.ResponseWriter, r *http.Request, v *view) error {
	res, err := s.clients.cluster.GetCluster(v.ctx, connect.NewRequest(&orreryv1.GetClusterRequest{}))
	if err != nil {
		return err
	}
	var maxLag float64
	for _, sh := range res.Msg.GetShards() {
		maxLag = max(maxLag, sh.GetLagSeconds())
	}
	s.render(w, r, v, http.StatusOK, "cluster", map[string]any{"C": res.Msg, "MaxLag": maxLag, "CLI": "orrery cluster"})
	return nil
}
