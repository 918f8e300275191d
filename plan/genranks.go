package plan

// genRank is a rank of a layout reduced to numbers: how many layers of
// each kind it holds and passes per micro-batch, and where its embedding
// and output layer are. Memory and the step's lower bound are then a few
// multiply-adds per rank (the search evaluates millions of plans).
type genRank struct {
	rank        int
	layers      int
	embed, head bool
	held        [4]float64 // layers of each kind (kindSlot) whose parameters the rank holds
	mb          [4]float64 // … one micro-batch passes, weighted by the chunk's share
	fl          [4]float64 // DualPipe: … weighted by the chunk's in-flight count
	mbE, mbH    float64    // the share of the embedding's and the output layer's chunk
	flE, flH    float64    // DualPipe: their chunks' in-flight counts
	mult        float64    // ranks of the layout with this shape (time ranks)
}

func kindSlots() [4][2]bool {
	return [4][2]bool{{false, false}, {false, true}, {true, false}, {true, true}}
}

func (j Job) genRankOf(rs rankShape) genRank {
	m := j.Model
	g := genRank{rank: rs.rank}
	for _, c := range rs.chunks {
		g.layers += c.layers
		for s, kd := range kindSlots() {
			n := float64(kindCount(m, c, kd[0], kd[1]))
			g.held[s] += n
			g.mb[s] += c.share * n
			g.fl[s] += c.flight * n
		}
		if c.embed {
			g.embed, g.mbE, g.flE = true, c.share, c.flight
		}
		if c.head {
			g.head, g.mbH, g.flH = true, c.share, c.flight
		}
	}
	return g
}

// genRanks fills the layout's memory and time ranks (once per layout).
func (j Job) genRanks(lay *layout) {
	if lay.genMem != nil {
		return
	}
	for _, r := range lay.memRanks {
		lay.genMem = append(lay.genMem, j.genRankOf(lay.ranks[r]))
	}
	idx := map[string]int{}
	for _, rs := range lay.ranks {
		k := rs.shapeKey()
		if i, ok := idx[k]; ok {
			lay.genTime[i].mult++
			continue
		}
		idx[k] = len(lay.genTime)
		g := j.genRankOf(rs)
		g.mult = 1
		lay.genTime = append(lay.genTime, g)
	}
}

// params is the rank's dense and expert parameters for one layer's of
// each kind kp (kindParams) and the end chunks' extras.
func (g genRank) params(j Job, p Plan, kp [2][2]float64, C int) (dense, expert float64) {
	for s, kd := range kindSlots() {
		if n := g.held[s]; n > 0 {
			dense += n * kp[b2i(kd[0])][0]
			expert += n * kp[b2i(kd[0])][1]
		}
	}
	if g.embed {
		d, e := j.chunkParams(p, kp, chunkShape{embed: true}, C)
		dense, expert = dense+d, expert+e
	}
	if g.head {
		d, e := j.chunkParams(p, kp, chunkShape{head: true}, C)
		dense, expert = dense+d, expert+e
	}
	return dense, expert
}

// perMB is one micro-batch's activations on the rank (the output layer's
// aside); flight is what a DualPipe rank holds at its peak.
func (g genRank) perMB(mk memKinds) (perMB, flight float64) {
	for s, kd := range kindSlots() {
		a := mk.act[b2i(kd[0])][b2i(kd[1])]
		perMB += g.mb[s] * a
		flight += g.fl[s] * a
	}
	perMB += g.mbE*mk.embed + g.mbH*mk.mtp
	flight += g.flE*mk.embed + g.flH*mk.mtp
	return perMB, flight
}

// shapeKey names a rank's chunks, so ranks holding the same are costed once.
func (rs rankShape) shapeKey() string {
	b := make([]byte, 0, 16*len(rs.chunks))
	for _, c := range rs.chunks {
		b = append(b, byte(c.layers), byte(c.layers>>8), byte(c.moe), byte(c.moe>>8), byte(c.window), byte(c.window>>8),
			byte(b2i(c.embed)), byte(b2i(c.head)), byte(c.share*4), '|')
	}
	return string(b)
}
