package shard

import "hash/fnv"

// DefaultCount is the number of shards a new cluster is created with. It
// never changes after cluster init, because every job's shard derives from it.
const DefaultCount = 64

// Of returns the shard of the job with the given 16-byte id, in [0, n).
func Of(id [16]byte, n int) int {
	if n <= 0 {
		panic("shard: count must be positive")
	}
	h := fnv.New32a()
	_, _ = h.Write(id[:])
	return int(h.Sum32() % uint32(n))
}
