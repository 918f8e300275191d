package plan

// The pipeline layout of the general path: what each rank holds, chunk by
// chunk, when layers differ (dense and MoE layers, sliding windows, MTP)
// or the schedule is a DualPipe. The L layers split over C chunks as the
// dense path splits them (partition: the lighter chunks at the ends), and
// chunks go to ranks by the schedule:
//
//	1f1b, gpipe, zb-h1   C = pp, chunk r on rank r
//	interleaved          C = pp·vpp, chunk c on rank c mod pp
//	dualpipe             C = pp, rank r holds chunks r and pp−1−r: the
//	                     forward direction's stage r and the reverse
//	                     direction's, so every parameter is on two ranks
//	dualpipev            C = 2·pp, rank r holds chunks r and 2pp−1−r (a V)
//
// Chunk 0 holds the input embedding, chunk C−1 the final norm, output
// layer, loss and the MTP modules.

// chunkShape is one model chunk.
type chunkShape struct {
	index       int
	layers      int // transformer layers
	moe         int // of them with routed experts
	window      int // of them with a sliding window
	embed, head bool
	// share is the fraction of the step's micro-batches that pass the
	// chunk on its rank: ½ per direction under DualPipe, else 1.
	share float64
	// flight is the micro-batches whose activations of this chunk the rank
	// holds at its peak under a DualPipe schedule (deepseek-ai/DualPipe's
	// step counts: chunk r (2pp−r) or (pp−r), chunk 2pp−1−r or pp−1−r: r+1);
	// 0 for the other schedules, whose in-flight count is the rank's
	// (Job.inFlight).
	flight float64
}

// rankShape is one pipeline rank's chunks.
type rankShape struct {
	rank   int
	chunks []chunkShape
}

// layout is the ranks of a general-path pipeline.
type layout struct {
	ranks []rankShape
	// timeRanks are the ranks whose step time can be the slowest (one of
	// each distinct chunk set), memRanks those whose memory can be the
	// largest (for the standard schedules the in-flight count falls with
	// the rank, so a rank matters only if it holds more than every rank
	// before it, or the output layer).
	timeRanks, memRanks []int
	C                   int // chunks in the split
	// have marks the layer kinds present, [moe][window] (kindIndex).
	have [2][2]bool
	// genMem and genTime are memRanks and the distinct ranks (with their
	// multiplicities) as numbers (genranks.go).
	genMem, genTime []genRank
}

// newLayout lays p's layers out over its pipeline ranks.
func (j Job) newLayout(p Plan) *layout {
	m := j.Model
	pp := p.PP
	C := pp * p.VPP
	switch p.Schedule {
	case DualPipeV:
		C = 2 * pp
	case DualPipe:
		C = pp
	}
	counts := chunkLayers(m.Layers, C)
	starts := make([]int, C)
	for c := 1; c < C; c++ {
		starts[c] = starts[c-1] + counts[c-1]
	}
	shape := func(c int) chunkShape {
		cs := chunkShape{index: c, layers: counts[c], moe: m.moeLayersIn(starts[c], counts[c]), embed: c == 0, head: c == C-1, share: 1}
		for i := starts[c]; i < starts[c]+counts[c]; i++ {
			if m.windowLayer(i) {
				cs.window++
			}
		}
		return cs
	}
	lay := &layout{C: C}
	for i := 0; i < m.Layers; i++ {
		a, b := kindIndex(m.moeLayer(i), m.windowLayer(i))
		lay.have[a][b] = true
	}
	for r := 0; r < pp; r++ {
		rs := rankShape{rank: r}
		switch p.Schedule {
		case DualPipeV, DualPipe:
			a, b := shape(r), shape(C-1-r)
			a.flight, b.flight = float64(C-r), float64(r+1)
			if p.Schedule == DualPipe {
				a.share, b.share = 0.5, 0.5
			}
			rs.chunks = []chunkShape{a, b}
		default:
			for c := r; c < C; c += pp {
				rs.chunks = append(rs.chunks, shape(c))
			}
		}
		lay.ranks = append(lay.ranks, rs)
	}
	lay.pickRanks(p)
	j.genRanks(lay)
	return lay
}

// totals sums a rank's chunks: layers, MoE layers, windowed layers, and
// whether it holds the embedding and the output layer.
func (rs rankShape) totals() (layers, moe, window int, embed, head bool) {
	for _, c := range rs.chunks {
		layers, moe, window = layers+c.layers, moe+c.moe, window+c.window
		embed, head = embed || c.embed, head || c.head
	}
	return
}

// pickRanks fills timeRanks and memRanks.
func (lay *layout) pickRanks(p Plan) {
	key := func(rs rankShape) [5]int {
		l, mo, w, e, h := rs.totals()
		return [5]int{l, mo, w, b2i(e), b2i(h)}
	}
	seen := map[[5]int]bool{}
	for _, rs := range lay.ranks {
		if k := key(rs); !seen[k] {
			seen[k] = true
			lay.timeRanks = append(lay.timeRanks, rs.rank)
		}
	}
	if p.Schedule.dual() { // in-flight counts differ chunk by chunk: every distinct rank
		seenM := map[[6]int]bool{}
		for _, rs := range lay.ranks {
			a, b := rs.chunks[0], rs.chunks[1]
			k := [6]int{a.layers, a.moe, int(a.flight), b.layers, b.moe, int(b.flight)}
			if !seenM[k] {
				seenM[k] = true
				lay.memRanks = append(lay.memRanks, rs.rank)
			}
		}
		return
	}
	var best [3]int
	for _, rs := range lay.ranks {
		l, mo, w, _, h := rs.totals()
		more := rs.rank == 0 || h || l > best[0] || mo > best[1] || w > best[2]
		if more {
			lay.memRanks = append(lay.memRanks, rs.rank)
		}
		best = [3]int{max(best[0], l), max(best[1], mo), max(best[2], w)}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
