package shard

import (
	"crypto/rand"
	"testing"
)

func TestOfIsStableAndSpread(t *testing.T) {
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	// Golden values: a job's shard must never change across releases.
	if got := Of(id, DefaultCount); got != 53 {
		t.Fatalf("shard of %x = %d, want 53", id, got)
	}
	if got := Of([16]byte{}, DefaultCount); got != 5 {
		t.Fatalf("shard of the zero id = %d, want 5", got)
	}
	counts := make([]int, DefaultCount)
	const n = 64_000
	for range n {
		var x [16]byte
		_, _ = rand.Read(x[:])
		counts[Of(x, DefaultCount)]++
	}
	for s, c := range counts {
		if c < n/DefaultCount/2 || c > n/DefaultCount*2 {
			t.Errorf("shard %d holds %d of %d ids; hashing is badly skewed", s, c, n)
		}
	}
}
