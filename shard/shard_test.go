package shard

import (
	"crypto/rand"
	"testing"
)

func TestOfIsStableAndSpread(t *testing.T) {
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if Of(id, DefaultCount) != Of(id, DefaultCount) {
		t.Fatal("shard of one id changed between calls")
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
