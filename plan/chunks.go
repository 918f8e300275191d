package plan

import "fmt"

// ChunkLayers is the number of layers of each of the pp·vpp model chunks
// (chunk c runs on pipeline rank c mod pp), by the rule partition
// describes: q = ⌊L/C⌋ layers each, plus one for every chunk but the first
// d = C − (L mod C) of the order C−1, 0, C−2, 1, … (none when C divides L).
// The engine splits its stages with it, so plan and engine agree layer for
// layer. Unlike the planner, which lets the two end chunks hold no layer,
// it asks every chunk to hold at least one (layers ≥ pp·vpp).
func ChunkLayers(layers, pp, vpp int) ([]int, error) {
	C := pp * vpp
	if pp < 1 || vpp < 1 {
		return nil, fmt.Errorf("pp=%d and vpp=%d must be >= 1", pp, vpp)
	}
	if layers < C {
		return nil, fmt.Errorf("layers=%d fewer than pp·vpp = %d·%d = %d model chunks (each needs a layer)", layers, pp, vpp, C)
	}
	q, d := splitCounts(layers, C)
	out := make([]int, C)
	for c := range out {
		out[c] = q
		if d > 0 {
			out[c]++
		}
	}
	for i := 0; i < d; i++ {
		c := i / 2
		if i%2 == 0 {
			c = C - 1 - i/2
		}
		out[c]--
	}
	return out, nil
}
