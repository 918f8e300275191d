package plan

import (
	"strings"
	"testing"
)

// TestChunkLayersMatchesPartition: per rank, the chunks add up to the
// layers the cost model's partition counts, and they sum to L.
func TestChunkLayersMatchesPartition(t *testing.T) {
	for _, tc := range []struct{ layers, pp, vpp int }{
		{126, 16, 1}, {70, 12, 1}, {8, 4, 1}, {6, 4, 1}, {7, 2, 1}, {12, 4, 2}, {13, 4, 2}, {9, 2, 3}, {5, 4, 1},
	} {
		got, err := ChunkLayers(tc.layers, tc.pp, tc.vpp)
		if err != nil {
			t.Fatal(err)
		}
		pt, ok := newPartition(tc.layers, tc.pp, tc.vpp)
		if !ok {
			t.Fatalf("%+v: no partition", tc)
		}
		sum := 0
		for k := 0; k < tc.pp; k++ {
			n := 0
			for c := k; c < len(got); c += tc.pp {
				n += got[c]
			}
			if n != pt.count(k) {
				t.Errorf("%+v: rank %d holds %d layers, the partition says %d (%v)", tc, k, n, pt.count(k), got)
			}
			sum += n
		}
		if sum != tc.layers {
			t.Errorf("%+v: %v sums to %d", tc, got, sum)
		}
	}
	if got, _ := ChunkLayers(126, 16, 1); got[0] != 7 || got[15] != 7 || got[1] != 8 {
		t.Errorf("Llama 3 405B split %v, want 7, 8 × 14, 7", got)
	}
	if _, err := ChunkLayers(3, 2, 2); err == nil || !strings.Contains(err.Error(), "layers=3 fewer than pp·vpp = 2·2 = 4") {
		t.Errorf("error %v", err)
	}
}
