package shard

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/shard/internal/db"
)

// NodeInfo is a scheduler node as the cluster view shows it.
type NodeInfo struct {
	ID          uuid.UUID
	Name        string
	Live        bool
	StartedAt   time.Time
	HeartbeatAt time.Time
	Shards      int
}

// ShardInfo is one shard's owner, epoch and lag.
type ShardInfo struct {
	ID             int
	Owner          *uuid.UUID
	OwnerName      string
	Epoch          int64
	LeaseExpiresAt *time.Time
	LagSeconds     float64
}

// Cluster reads the nodes and the shard map.
func Cluster(ctx context.Context, pool *pgxpool.Pool) ([]NodeInfo, []ShardInfo, error) {
	q := db.New(pool)
	nodes, err := q.ListNodes(ctx)
	if err != nil {
		return nil, nil, err
	}
	shards, err := q.ListShards(ctx)
	if err != nil {
		return nil, nil, err
	}
	owned := map[uuid.UUID]int{}
	outShards := make([]ShardInfo, len(shards))
	for i, s := range shards {
		outShards[i] = ShardInfo{ID: int(s.ID), Owner: s.OwnerNode, Epoch: s.Epoch, LeaseExpiresAt: s.LeaseExpiresAt, LagSeconds: s.LagSeconds}
		outShards[i].OwnerName = s.OwnerName.String
		if s.OwnerNode != nil {
			owned[*s.OwnerNode]++
		}
	}
	outNodes := make([]NodeInfo, len(nodes))
	for i, n := range nodes {
		outNodes[i] = NodeInfo{ID: n.ID, Name: n.Name, Live: n.Live, StartedAt: n.StartedAt, HeartbeatAt: n.HeartbeatAt, Shards: owned[n.ID]}
	}
	return outNodes, outShards, nil
}
