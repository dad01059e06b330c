package shard

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/shard/internal/db"
)

// LostError says that a fenced transaction holds none of the leases it was
// fenced with.
type LostError struct {
	Leases []*Lease
}

func (e *LostError) Error() string {
	return fmt.Sprintf("shard: ownership lost of all %d shard(s) fenced", len(e.Leases))
}

// Is makes a *LostError match ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Fence is the check every write for a shard makes in its own transaction
// (invariant 3): it returns those of leases this node still holds in tx, at
// their epochs, with a live lease, and keeps any claim off them until tx
// ends (a FOR KEY SHARE lock on their rows: see the package doc for a
// process stopped inside tx).
//
// The rule for a partly lost fence, for every fenced writer: write, in
// tx, for the leases Fence returns and for no other shard. A lease found
// lost is dropped from the Manager at once (its Done is closed), whatever
// becomes of tx. When none of leases is held, Fence returns a *LostError
// (errors.Is(err, ErrLost)) and the writer writes nothing.
func (m *Manager) Fence(ctx context.Context, tx pgx.Tx, leases []*Lease) ([]*Lease, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	ids, epochs := pairs(leases)
	rows, err := db.New(tx).Fence(ctx, db.FenceParams{Node: m.cfg.NodeID, Ids: ids, Epochs: epochs})
	if err != nil {
		return nil, err
	}
	ok := make(map[int]bool, len(rows))
	for _, r := range rows {
		ok[int(r.ID)] = true
	}
	held := make([]*Lease, 0, len(rows))
	var lost []*Lease
	for _, l := range leases {
		if ok[l.Shard] {
			held = append(held, l)
		} else {
			lost = append(lost, l)
			m.Lost(l)
		}
	}
	if len(held) == 0 {
		return nil, &LostError{Leases: lost}
	}
	return held, nil
}

// Shards are the leases' shard numbers.
func Shards(leases []*Lease) []int32 {
	ids, _ := pairs(leases)
	return ids
}
