package tcp

import (
	"fmt"
	"testing"

	"trellis/comm/commtest"
)

// TestReductionsFoldInRankOrder: every all-reduce and reduce-scatter, small
// (direct) or large (beyond directBytes, ring-sized), gives bit for bit what
// comm/local gives: comm.Reduce of the ranks' buffers in rank order 0, 1,
// …, p-1 (commtest.CheckRankOrder, which the conformance suite also runs,
// there with frame authentication on).
func TestReductionsFoldInRankOrder(t *testing.T) {
	for _, p := range []int{3, 4} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			if err := commtest.CheckRankOrder(startWorld(t, p, DefaultTimeout, nil)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
