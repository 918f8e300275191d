package plan

import (
	"fmt"
	"strings"
)

// partition is how the L layers of a pipeline are split over its C = pp·vpp
// model chunks (chunk c runs on rank c mod pp; rank 0 also holds the input
// embedding, rank pp−1 the final norm, output layer and loss).
//
// With q = ⌊L/C⌋ and r = L mod C, r chunks hold q+1 layers and the other
// d = C − r (none when r = 0) hold q. The lighter chunks go to the ends,
// alternately from the last: chunk C−1, chunk 0, chunk C−2, chunk 1, …, so
// the stages that also carry the output layer and the embedding give up a
// layer first. This is Megatron-Core's uneven split
// (--decoder-first/last-pipeline-num-layers,
// --account-for-embedding/loss-in-pipeline-split) and what Meta did for
// Llama 3 405B ("we reduce one Transformer layer each from the first and
// the last stages": 126 layers over 16 stages is 7, 8 × 14, 7), and
// BigScience for BLOOM (70 layers over 12 stages: 5, 6 × 10, 5, the
// tied embedding counted as a layer at each end). Every chunk holds at
// least one layer, except that the two end chunks may hold none (then they
// hold only the embedding or the output layer).
//
// The partition keeps what the cost model needs without a per-rank slice
// in the search: the layers on rank 0 and on rank pp−1, the most layers on
// a middle rank (which sets the pace among them), and the ranks whose
// memory can be the largest (see memRanks).
type partition struct {
	pp, vpp     int
	first, last int // layers on rank 0 (all its chunks) and on rank pp-1
	mid         int // the most layers on a rank 0 < k < pp-1 (0 when pp ≤ 2)
	midRank     int // the lowest such rank
	// memRanks are the ranks 0 ≤ k < pp−1 that hold more layers than every
	// rank before them, with their layers: activations and parameters of a
	// rank grow with its layers and its in-flight micro-batches shrink with
	// k, so only these (and rank pp−1) can be the most loaded.
	memRanks    []rankLayers
	chunk       float64 // mean layers per chunk, L/C
	layersTotal int     // L
}

// rankLayers is a pipeline rank and the layers it holds.
type rankLayers struct{ rank, layers int }

// newPartition splits layers over pp ranks × vpp chunks; ok is false when
// some chunk other than the two end chunks would hold no layer.
func newPartition(layers, pp, vpp int) (partition, bool) {
	if pp < 1 || vpp < 1 {
		return partition{}, false
	}
	if q, d := splitCounts(layers, pp*vpp); q == 0 && d > 2 {
		return partition{}, false
	}
	pt := partition{pp: pp, vpp: vpp, layersTotal: layers, chunk: float64(layers) / float64(pp*vpp)}
	pt.first, pt.last = pt.count(0), pt.count(pp-1)
	if pp == 1 {
		return pt, true
	}
	full := pt.vpp * (layers/(pp*vpp) + 1)
	if layers%(pp*vpp) == 0 {
		full = layers / pp
	}
	best := -1
	for k := 0; k < pp-1; k++ {
		n := pt.first
		if k > 0 {
			n = full - pt.short(k)
		}
		if n > best {
			best = n
			pt.memRanks = append(pt.memRanks, rankLayers{k, n})
		}
		if k > 0 && n > pt.mid {
			pt.mid, pt.midRank = n, k
		}
		if n == full && k > 0 {
			break // no later middle rank holds more, nor can be more loaded
		}
	}
	return pt, true
}

// splitCounts is q = ⌊L/C⌋ and the number d of chunks that hold q (not
// q+1) layers.
func splitCounts(layers, chunks int) (q, d int) {
	q = layers / chunks
	if layers%chunks > 0 {
		d = chunks - layers%chunks
	}
	return q, d
}

// short counts the lighter chunks of rank k: the first d chunks of the
// order C−1, 0, C−2, 1, … that land on rank k.
func (pt partition) short(k int) int {
	C := pt.pp * pt.vpp
	_, d := splitCounts(pt.layersTotal, C)
	n := 0
	for i := 0; i < d; i++ {
		c := i / 2
		if i%2 == 0 {
			c = C - 1 - i/2
		}
		if c%pt.pp == k {
			n++
		}
	}
	return n
}

// count is the number of layers on rank k.
func (pt partition) count(k int) int {
	C := pt.pp * pt.vpp
	q, d := splitCounts(pt.layersTotal, C)
	if d == 0 {
		return pt.vpp * q
	}
	return pt.vpp*(q+1) - pt.short(k)
}

// on is the number of layers on rank k for the ranks the time model
// costs: 0, pp−1 and midRank (any other middle rank: mid, an upper bound).
func (pt partition) on(k int) int {
	switch k {
	case 0:
		return pt.first
	case pt.pp - 1:
		return pt.last
	}
	return pt.mid
}

// describe lists the layers per stage, runs of equal stages collapsed:
// "7, 8 × 14, 7".
func (pt partition) describe() string {
	var parts []string
	for k := 0; k < pt.pp; {
		n, run := pt.count(k), 1
		for k+run < pt.pp && pt.count(k+run) == n {
			run++
		}
		if run == 1 {
			parts = append(parts, fmt.Sprint(n))
		} else {
			parts = append(parts, fmt.Sprintf("%d × %d", n, run))
		}
		k += run
	}
	s := strings.Join(parts, ", ")
	if pt.vpp > 1 {
		s += fmt.Sprintf(" (in %d chunks of about %.3g layers each)", pt.vpp, pt.chunk)
	}
	return s
}
