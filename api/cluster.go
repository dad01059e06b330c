package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/shard"
)

// clusterServer implements orrery.v1.ClusterService.
type clusterServer struct {
	orreryv1connect.UnimplementedClusterServiceHandler
	pool   *pgxpool.Pool
	queues dispatch.QueueDBs
	log    *slog.Logger
}

// GetCluster shows the nodes and shards to every caller (they hold no
// tenant's data), and the workers and queue depths as the caller may see
// them: a system admin all; another caller the shared workers (which serve
// it too) and those bound to its tenant, and the depths of its tenant's
// bound queues only (a shared queue's depth counts every tenant's tasks).
func (s *clusterServer) GetCluster(ctx context.Context, _ *connect.Request[orreryv1.GetClusterRequest]) (*connect.Response[orreryv1.GetClusterResponse], error) {
	p := principalOf(ctx)
	nodes, shards, err := shard.Cluster(ctx, s.pool)
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	out := &orreryv1.GetClusterResponse{}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, &orreryv1.Node{Id: n.ID.String(), Name: n.Name, Live: n.Live,
			StartTime: timestamppb.New(n.StartedAt), HeartbeatTime: timestamppb.New(n.HeartbeatAt), Shards: int32(n.Shards)})
	}
	for _, sh := range shards {
		ps := &orreryv1.Shard{Id: int32(sh.ID), OwnerName: sh.OwnerName, Epoch: sh.Epoch, LeaseExpireTime: timeToProto(sh.LeaseExpiresAt), LagSeconds: sh.LagSeconds}
		if sh.Owner != nil {
			ps.OwnerNode = sh.Owner.String()
		}
		out.Shards = append(out.Shards, ps)
	}
	workers, err := store.New(s.pool).ListWorkers(ctx, store.ListWorkersParams{Tenant: &p.Tenant, AllTenants: p.SystemAdmin})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	for _, w := range workers {
		if w.TenantID == nil && strings.Contains(string(w.Queues), `"`+dispatch.HandoffQueue+`"`) {
			continue // a gateway (an API node's, listed as a node)
		}
		pw := &orreryv1.Worker{Id: w.ID.String(), Name: w.Name, Live: w.Live, StartTime: timestamppb.New(w.StartedAt),
			HeartbeatTime: timestamppb.New(w.HeartbeatAt), TasksHeld: int32(w.Held)}
		_ = json.Unmarshal(w.Queues, &pw.Queues)   // written by the worker as {"queue": n}
		_ = json.Unmarshal(w.Tenants, &pw.Tenants) // and ["tenant", ...]
		pw.Capacity, pw.Allocated = workerResources(w)
		if w.Enforces != nil {
			pw.Enforces = *w.Enforces
		}
		// A remote worker of the caller's tenant (all, for a system admin).
		if w.TenantID != nil {
			pw.Remote = true
			_ = json.Unmarshal(w.Types, &pw.Types)
			queues := make(map[string]int32, len(pw.Queues))
			for q, n := range pw.Queues {
				queues[dispatch.RemoteBase(q)] = n // QUEUE@TENANT_ID, as its steps name it
			}
			pw.Queues = queues
			out.Workers = append(out.Workers, pw)
			continue
		}
		pw.Shared = len(pw.Tenants) == 0
		if p.SystemAdmin || pw.Shared || slices.Contains(pw.Tenants, p.TenantName) {
			if !p.SystemAdmin { // nothing of the worker's other tenants
				pw.Tenants = slices.DeleteFunc(pw.Tenants, func(t string) bool { return t != p.TenantName })
				maps.DeleteFunc(pw.Queues, func(q string, _ int32) bool { return dispatch.BaseQueue(q) != q && !dispatch.BoundTo(q, p.TenantName) })
			}
			out.Workers = append(out.Workers, pw)
		}
	}
	if s.queues.Default != nil {
		depths, err := dispatch.QueueDepthsOf(ctx, s.queues)
		if err != nil && len(depths) == 0 {
			return nil, toConnect(ctx, s.log, err)
		}
		if err != nil { // some queue database is down: the others' depths
			s.log.Warn("cluster view: queue depths", "err", err)
		}
		capacity, allocated, err := queueResources(ctx, store.New(s.pool))
		if err != nil {
			return nil, toConnect(ctx, s.log, err)
		}
		for _, q := range slices.Sorted(maps.Keys(depths)) {
			if !p.SystemAdmin && !dispatch.BoundTo(q, p.TenantName) {
				continue
			}
			qd := &orreryv1.QueueDepth{Queue: q, Ready: depths[q].Ready, OldestReadySeconds: depths[q].OldestSeconds}
			if c, ok := capacity[q]; ok {
				qd.Capacity, qd.Allocated = vectorToProto(c), vectorToProto(allocated[q])
			}
			out.Queues = append(out.Queues, qd)
		}
	}
	keys, err := store.New(s.pool).BusiestKeys(ctx, store.BusiestKeysParams{AllTenants: p.SystemAdmin, TenantID: p.Tenant, N: busiestKeys})
	if err != nil {
		return nil, toConnect(ctx, s.log, err)
	}
	for _, k := range keys {
		out.BusiestKeys = append(out.BusiestKeys, &orreryv1.BusyKey{Kind: k.Kind, Tenant: k.Tenant, Key: k.Key, Waiting: k.Waiting, OldestWaitingSeconds: k.OldestSeconds})
	}
	return connect.NewResponse(out), nil
}

// busiestKeys bounds the keys of flow control GetCluster lists.
const busiestKeys = 20

// workerResources are a worker's capacity (nil when it declares none) and
// what its running attempts ask for.
func workerResources(w store.ListWorkersRow) (capacity, allocated *orreryv1.Resources) {
	if w.CapCpu.Valid {
		capacity = vectorToProto(resources.FromColumns(w.CapCpu.Int64, w.CapMemory.Int64, w.CapGpu.Int64, w.CapCustom))
	}
	return capacity, vectorToProto(resources.FromColumns(w.UsedCpu, w.UsedMemory, w.UsedGpu, w.UsedCustom))
}

// queueResources are, per queue, what its live workers declare together
// (those queues where one declares) and what its running tasks ask for.
func queueResources(ctx context.Context, q *store.Queries) (capacity, allocated map[string]resources.Vector, err error) {
	caps, err := q.LiveQueueCapacities(ctx)
	if err != nil {
		return nil, nil, err
	}
	capacity, allocated = map[string]resources.Vector{}, map[string]resources.Vector{}
	for _, c := range caps {
		if c.Cpu > 0 || c.Memory > 0 || c.Gpu > 0 || len(c.Custom) > 0 {
			capacity[c.Queue] = resources.FromColumns(c.Cpu, c.Memory, c.Gpu, c.Custom)
		}
	}
	rows, err := q.QueueAllocations(ctx)
	for _, r := range rows {
		allocated[r.Queue] = resources.FromColumns(r.Cpu, r.Memory, r.Gpu, r.Custom)
	}
	return capacity, allocated, err
}
