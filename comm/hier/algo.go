package hier

import (
	"slices"

	"trellis/comm"
	"trellis/tensor"
)

// Tags of this group's own messages on crossG (user messages travel on
// p2pG, so they never meet these).
const (
	tagChain = iota + 1 // a run's partial fold, to the next run
	tagFinal            // the result, from the last run to the others
	tagBlock            // a host's all-gather block, between leaders
	tagBcast            // a broadcast payload, to another host's leader
	tagSwap             // an all-to-all chunk, between hosts
)

// f32 returns n fp32 elements of the group's scratch space.
func (g *group) f32(n int) []float32 {
	if cap(g.scratch) < n {
		g.scratch = make([]float32, n)
	}
	return g.scratch[:n]
}

// allReduce folds along the runs (package doc): the first member of run j
// folds the previous runs' partial into its own values, run j all-reduces
// in rank order (which continues the fold), its last member passes it on;
// the last run finishes (Avg's scale, bf16's rounding) and sends the
// result back to every other run's first member, which broadcasts it at
// home. The partials are fp32 (bf16 is widened exactly and rounded once).
// The buffer goes in pieces (chainPieces), each along the whole chain, the
// sends asynchronous: while piece i+1's partial travels forward, piece i's
// result travels back, so both directions of a link carry data at once.
func (g *group) allReduce(buf comm.Buf, op comm.ReduceOp) error {
	n := buf.Len()
	if n == 0 {
		return nil
	}
	x := buf.Float32s()
	if buf.DType() == tensor.BF16 {
		x = make([]float32, n)
		for i, v := range buf.BFloat16s() {
			x[i] = v.Float32()
		}
	}
	red := op
	if op == comm.Avg {
		red = comm.Sum
	}
	k, j, r := len(g.runs), g.myRun, g.runs[g.myRun]
	bounds := comm.Partition(n, chainPieces(n))
	pieces := len(bounds) - 1
	var in []comm.Work // the previous run's partials, all posted at once
	var p []float32
	if j > 0 && g.me == r.first {
		p = g.f32(n)
		for i := range pieces {
			in = append(in, g.crossG.Recv(comm.F32(p[bounds[i]:bounds[i+1]]), g.runs[j-1].last, tagChain))
		}
	}
	var out []comm.Work // sends still in flight
	defer func() { waitAll(out) }()
	for i := range pieces {
		lo, hi := bounds[i], bounds[i+1]
		xi := comm.F32(x[lo:hi])
		if in != nil {
			g.await(g.runs[j-1].last)
			if err := in[i].Wait(); err != nil {
				return err
			}
			comm.Reduce(xi, []comm.Buf{comm.F32(p[lo:hi]), xi}, red, 0) // P ⊕ x: the fold's next step
		}
		if err := comm.AllReduce(g.runG, xi, red); err != nil {
			return err
		}
		switch {
		case j < k-1 && g.me == r.last:
			out = append(out, g.crossG.Send(xi, g.runs[j+1].first, tagChain))
		case j == k-1:
			bi := buf.Slice(lo, hi)
			finish(bi, x[lo:hi], op, g.Size())
			if g.me == r.first {
				for _, o := range g.runs[:k-1] {
					out = append(out, g.crossG.Send(bi, o.first, tagFinal))
				}
			}
		}
	}
	if j == k-1 {
		return waitAll(out)
	}
	if err := waitAll(out); err != nil { // before the result overwrites what was sent
		return err
	}
	out = nil
	for i := range pieces {
		bi := buf.Slice(bounds[i], bounds[i+1])
		if g.me == r.first {
			g.await(g.runs[k-1].first)
			if err := comm.Recv(g.crossG, bi, g.runs[k-1].first, tagFinal); err != nil {
				return err
			}
		}
		if err := comm.Broadcast(g.runG, bi, 0); err != nil {
			return err
		}
	}
	return nil
}

// chainPieces is how many pieces an all-reduce of n elements is cut
// into: about 1 MiB of fp32 each, at most 64, one below 64 Ki elements.
func chainPieces(n int) int {
	return min(max(n/(256<<10), 1), 64)
}

// finish writes the fold's result: s·x (s = fl(1/p) for Avg, else 1),
// rounded to bf16 once for a bf16 buffer: what comm.Reduce stores.
func finish(buf comm.Buf, x []float32, op comm.ReduceOp, p int) {
	s := float32(1)
	if op == comm.Avg {
		s = comm.AvgScale(p)
	}
	if buf.DType() == tensor.BF16 {
		h := buf.BFloat16s()
		for i, v := range x {
			h[i] = tensor.ToBF16(s * v)
		}
		return
	}
	if s != 1 {
		for i := range x {
			x[i] *= s
		}
	}
}

func waitAll(ws []comm.Work) error {
	var first error
	for _, w := range ws {
		if err := w.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// reduceScatter is the all-reduce of a copy of src, keeping chunk me.
func (g *group) reduceScatter(dst, src comm.Buf, op comm.ReduceOp) error {
	m := dst.Len()
	tmp := clone(src)
	if err := g.allReduce(tmp, op); err != nil {
		return err
	}
	copy(bytesOf(dst), bytesOf(tmp.Slice(g.me*m, (g.me+1)*m)))
	return nil
}

// allGather: the host's members gather their chunks (Intra), the hosts'
// leaders swap blocks (Inter), each leader broadcasts the whole at home.
func (g *group) allGather(dst, src comm.Buf) error {
	m, L := src.Len(), len(g.local)
	block := newBuf(src.DType(), L*m)
	if err := comm.AllGather(g.hostG, block, src); err != nil {
		return err
	}
	leader := g.local[0] == g.me
	if leader {
		var ops []comm.P2POp
		blocks := map[int]comm.Buf{g.hostOf(g.me): block}
		for _, h := range g.heads {
			if h == g.me {
				continue
			}
			theirs := newBuf(src.DType(), g.count(g.hostOf(h))*m)
			blocks[g.hostOf(h)] = theirs
			ops = append(ops, comm.RecvOp(theirs, h, tagBlock), comm.SendOp(block, h, tagBlock))
		}
		if err := comm.BatchP2P(g.crossG, ops).Wait(); err != nil {
			return err
		}
		at := map[int]int{}
		for i := range g.members {
			h := g.hostOf(i)
			copyBuf(dst.Slice(i*m, (i+1)*m), blocks[h].Slice(at[h]*m, (at[h]+1)*m))
			at[h]++
		}
	}
	return comm.Broadcast(g.hostG, dst, 0)
}

// count is the number of members on host h.
func (g *group) count(h int) int {
	c := 0
	for i := range g.members {
		if g.hostOf(i) == h {
			c++
		}
	}
	return c
}

// broadcast: the root sends to every other host's leader, then every host
// broadcasts from the root or its leader.
func (g *group) broadcast(buf comm.Buf, root int) error {
	rootHost := g.hostOf(root)
	from := 0
	if rootHost == g.hostOf(g.me) {
		from = slices.Index(g.local, root)
	}
	switch {
	case g.me == root:
		var ws []comm.Work
		for _, h := range g.heads {
			if g.hostOf(h) != rootHost {
				ws = append(ws, g.crossG.Send(buf, h, tagBcast))
			}
		}
		if err := waitAll(ws); err != nil {
			return err
		}
	case rootHost != g.hostOf(g.me) && g.local[0] == g.me:
		g.await(root)
		if err := comm.Recv(g.crossG, buf, root, tagBcast); err != nil {
			return err
		}
	}
	return comm.Broadcast(g.hostG, buf, from)
}

// allToAll: chunks between hosts go directly over Inter while the host's
// members swap theirs in shared memory.
func (g *group) allToAll(dst, src comm.Buf) error {
	p, m, L := g.Size(), src.Len()/g.Size(), len(g.local)
	var ops []comm.P2POp
	for q := range p {
		if g.hostOf(q) != g.hostOf(g.me) {
			ops = append(ops, comm.RecvOp(dst.Slice(q*m, (q+1)*m), q, tagSwap), comm.SendOp(src.Slice(q*m, (q+1)*m), q, tagSwap))
		}
	}
	batch := comm.BatchP2P(g.crossG, ops)
	in, out := newBuf(src.DType(), L*m), newBuf(src.DType(), L*m)
	for i, q := range g.local {
		copyBuf(in.Slice(i*m, (i+1)*m), src.Slice(q*m, (q+1)*m))
	}
	err := comm.AllToAll(g.hostG, out, in)
	for i, q := range g.local {
		copyBuf(dst.Slice(q*m, (q+1)*m), out.Slice(i*m, (i+1)*m))
	}
	if berr := batch.Wait(); err == nil {
		err = berr
	}
	return err
}

// barrier: every host's members, then the leaders, then the members.
func (g *group) barrier() error {
	if err := comm.Barrier(g.hostG); err != nil {
		return err
	}
	if g.headsG != nil {
		if err := comm.Barrier(g.headsG); err != nil {
			return err
		}
	}
	return comm.Barrier(g.hostG)
}
