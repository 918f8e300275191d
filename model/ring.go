package model

import (
	"math"
	"time"

	"trellis/comm"
	"trellis/ops"
)

// Ring attention (Liu et al. 2023) over the context-parallel group of n
// ranks: each rank holds the queries, keys and values of its two chunks
// of every sequence (cpSplit) and the key/value blocks travel round the
// ring, rank r sending to r+1 and receiving from r−1, so at step s it
// holds rank (r−s)'s. Each block's partial attention is merged into the
// running result with the flash kernel's online softmax: per query row the
// running maximum m and sum l,
//
//	m' = max(m, max_j S_ij)      l' = l·e^(m−m') + Σ_j e^(S_ij−m')
//	o' = o·e^(m−m') + Σ_j e^(S_ij−m')·v_j
//
// (S = q·kᵀ/√d under the causal mask of the chunks' global positions: a
// key chunk after the query chunk is skipped, the same chunk is masked
// triangularly, an earlier one is whole), and after the last block
// out = o/l and lse = m + ln l, which the stash keeps (B,NH',T/cp) as
// flash does. The backward runs the ring again: with D = rowsum(dO⊙O) and
// P = e^(S−lse) recomputed per block,
//
//	dV_j += Pᵀ·dO    dS = P⊙(dO·V_jᵀ − D)/√d    dQ += dS·K_j    dK_j += dSᵀ·Q
//
// where dK_j, dV_j travel with the block: each rank adds its contribution
// to the sum it receives from r−1 and sends it on, and after n steps every
// block's sum has come home. Each step's transfer is posted before the
// step's compute (a batched send/receive of the next block; in the
// backward the receive of the incoming sum too), so it is hidden when the
// compute is longer.
const (
	tagRingKV  = 1 // the key/value blocks
	tagRingDKV = 2 // the backward's travelling dK, dV sums
)

// ringBufs are the ring's scratch (arch.Config.RingElems), carved from
// the workspace.
type ringBufs struct {
	kv     [2][]float32 // (B·T/cp, 2·KV') the block held and the one arriving
	dIn    []float32    // backward: the arriving sum of dK, dV
	dLoc   []float32    // backward: this rank's contribution to the block held
	dOut   [2][]float32 // backward: the sums sent (two: a send may be in flight)
	s1, s2 []float32    // (c, c) scores/probabilities and dP/dS
	rowA   []float32    // (B,NH',T/cp) running sums l; backward D
	rowB   []float32    // spare row buffer (B,NH',T/cp)
}

// RingWork is what a rank's ring attention computed: the chunk pairs
// (c×c score tiles, a diagonal one counted as half) and the time spent
// in the blocks' compute, summed over the passes since the runner was made.
type RingWork struct {
	Pairs   float64
	Compute time.Duration
}

// RingWork reports the ring attention's work so far (zero without cp).
func (m *GPT) RingWork() RingWork { return m.work }

func (m *GPT) carveRing(buf []float32) {
	d := m.d
	blk, rows, c := m.B*m.T*2*d.KVl, m.B*d.NH*m.T, m.split.c
	next := func(n int) []float32 {
		s := buf[:n:n]
		buf = buf[n:]
		return s
	}
	r := &m.ring
	r.kv[0], r.kv[1], r.dIn, r.dLoc, r.dOut[0], r.dOut[1] = next(blk), next(blk), next(blk), next(blk), next(blk), next(blk)
	r.s1, r.s2, r.rowA, r.rowB = next(c*c), next(c*c), next(rows), next(rows)
}

// chunkOf is the global chunk index of rank r's local chunk k.
func (p cpSplit) chunkOf(r, k int) int { q := p; q.r = r; return q.chunk(k) }

// ringPeers are this rank's ring neighbours.
func (m *GPT) ringPeers() (n, me, next, prev int) {
	n, me = m.cp.Size(), m.cp.Rank()
	return n, me, (me + 1) % n, (me - 1 + n) % n
}

// packKV copies the key and value columns of qkv (rows of W) into kv
// (rows of 2·KV').
func (m *GPT) packKV(kv, qkv []float32, rows int) {
	d := m.d
	W, KV2 := d.qkvW(), 2*d.KVl
	for i := 0; i < rows; i++ {
		copy(kv[i*KV2:(i+1)*KV2], qkv[i*W+d.Cl:(i+1)*W])
	}
}

// ringForward is the attention core under cp: out (B,T',C') and lse
// (B,NH',T') from the rank's qkv (B,T',C'+2·KV'), T' = T/cp.
func (m *GPT) ringForward(out, lse, qkv []float32, B int) error {
	d := m.d
	T := m.T
	r := &m.ring
	blk := B * T * 2 * d.KVl
	cur, nxt := r.kv[0][:blk], r.kv[1][:blk]
	m.packKV(cur, qkv, B*T)
	rows := B * d.NH * T
	mx, l := lse[:rows], r.rowA[:rows]
	for i := range mx {
		mx[i] = float32(math.Inf(-1))
	}
	clear(l)
	clear(out[:B*T*d.Cl])
	n, me, next, prev := m.ringPeers()
	for s := 0; s < n; s++ {
		var w comm.Work
		post := func() {
			if s < n-1 {
				w = comm.BatchP2P(m.cp, []comm.P2POp{comm.RecvOp(comm.F32(nxt), prev, tagRingKV), comm.SendOp(comm.F32(cur), next, tagRingKV)})
			}
		}
		if !m.ringSerial {
			post()
		}
		m.ringBlockForward(out, mx, l, qkv, cur, (me-s+n)%n, B)
		if m.ringSerial {
			post()
		}
		if w != nil {
			if err := w.Wait(); err != nil {
				return err
			}
		}
		cur, nxt = nxt, cur
	}
	for b := 0; b < B; b++ {
		for h := 0; h < d.NH; h++ {
			for i := 0; i < T; i++ {
				ri := (b*d.NH+h)*T + i
				inv := 1 / l[ri]
				o := out[(b*T+i)*d.Cl+h*d.HS:][:d.HS]
				for x := range o {
					o[x] *= inv
				}
				mx[ri] += float32(math.Log(float64(l[ri])))
			}
		}
	}
	return nil
}

// pairs calls f for every (query chunk, key chunk) pair of this rank's
// chunks and block src's that the causal mask does not hide.
func (m *GPT) pairs(src int, f func(cq, ck int, diag bool)) {
	sp := m.split
	for cq := 0; cq < 2; cq++ {
		Q := sp.chunk(cq)
		for ck := 0; ck < 2; ck++ {
			K := sp.chunkOf(src, ck)
			if K > Q {
				continue
			}
			f(cq, ck, K == Q)
		}
	}
}

// tile is the attention tile of query chunk cq of head h against key
// chunk ck of kv head g of sequence b, from the rank's qkv and the block
// kv held.
func (m *GPT) tile(qkv, kv []float32, b, h, g, cq, ck int, diag bool) ops.AttnTile {
	d, T, c := m.d, m.T, m.split.c
	W, KV2 := d.qkvW(), 2*d.KVl
	ko := (b*T+ck*c)*KV2 + g*d.HS
	return ops.AttnTile{Q: qkv[(b*T+cq*c)*W+h*d.HS:], K: kv[ko:], V: kv[ko+d.KVl:], LDQ: W, LDKV: KV2, C: c, HS: d.HS,
		Diag: diag, Scale: float32(1 / math.Sqrt(float64(d.HS)))}
}

// ringBlockForward merges block src's keys and values (kv) into the
// running out, maxima mx and sums l (ops.AttentionTileForward per tile).
func (m *GPT) ringBlockForward(out, mx, l, qkv, kv []float32, src, B int) {
	t0 := time.Now()
	defer func() { m.work.Compute += time.Since(t0) }()
	d, T, c := m.d, m.T, m.split.c
	grp := d.NH / d.KV
	for b := 0; b < B; b++ {
		for h := 0; h < d.NH; h++ {
			m.pairs(src, func(cq, ck int, diag bool) {
				m.work.Pairs += pairWork(diag)
				ri := (b*d.NH+h)*T + cq*c
				m.k.AttentionTileForward(m.tile(qkv, kv, b, h, h/grp, cq, ck, diag), out[(b*T+cq*c)*d.Cl+h*d.HS:], d.Cl,
					mx[ri:ri+c], l[ri:ri+c], m.ring.s1)
			})
		}
	}
}

// pairWork is a chunk pair's share of the attention work: a diagonal
// pair's causal triangle is half of a whole one.
func pairWork(diag bool) float64 {
	if diag {
		return 0.5
	}
	return 1
}

// ringBackward SETS dqkv (B,T',C'+2·KV') to the gradient of the ring
// attention given dout (B,T',C'), from its input qkv, output out and the
// log-sum-exps lse.
func (m *GPT) ringBackward(dqkv, dout, qkv, out, lse []float32, B int) error {
	d := m.d
	T := m.T
	r := &m.ring
	W, KV2 := d.qkvW(), 2*d.KVl
	blk := B * T * KV2
	clear(dqkv[:B*T*W])
	D := r.rowA[:B*d.NH*T]
	for b := 0; b < B; b++ {
		for h := 0; h < d.NH; h++ {
			for i := 0; i < T; i++ {
				o := (b*T+i)*d.Cl + h*d.HS
				var s float32
				for x := 0; x < d.HS; x++ {
					s += dout[o+x] * out[o+x]
				}
				D[(b*d.NH+h)*T+i] = s
			}
		}
	}
	cur, nxt := r.kv[0][:blk], r.kv[1][:blk]
	dIn, dLoc := r.dIn[:blk], r.dLoc[:blk]
	m.packKV(cur, qkv, B*T)
	n, me, next, prev := m.ringPeers()
	var sent [2]comm.Work
	fail := func(err error) error {
		for _, w := range sent {
			if w != nil {
				w.Wait()
			}
		}
		return err
	}
	for s := 0; s < n; s++ {
		var wkv, win comm.Work
		post := func() {
			if s < n-1 {
				wkv = comm.BatchP2P(m.cp, []comm.P2POp{comm.RecvOp(comm.F32(nxt), prev, tagRingKV), comm.SendOp(comm.F32(cur), next, tagRingKV)})
			}
			if s > 0 {
				win = m.cp.Recv(comm.F32(dIn), prev, tagRingDKV)
			}
		}
		if !m.ringSerial {
			post()
		}
		clear(dLoc)
		m.ringBlockBackward(dqkv, dLoc, dout, qkv, cur, lse, D, (me-s+n)%n, B)
		if m.ringSerial {
			post()
		}
		o := r.dOut[s%2][:blk]
		if w := sent[s%2]; w != nil {
			if err := w.Wait(); err != nil {
				return fail(err)
			}
		}
		if win != nil {
			if err := win.Wait(); err != nil {
				return fail(err)
			}
			for i := range o {
				o[i] = dIn[i] + dLoc[i]
			}
		} else {
			copy(o, dLoc)
		}
		sent[s%2] = m.cp.Send(comm.F32(o), next, tagRingDKV)
		if wkv != nil {
			if err := wkv.Wait(); err != nil {
				return fail(err)
			}
		}
		cur, nxt = nxt, cur
	}
	if err := m.cp.Recv(comm.F32(dIn), prev, tagRingDKV).Wait(); err != nil {
		return fail(err)
	}
	for _, w := range sent {
		if w != nil {
			if err := w.Wait(); err != nil {
				return err
			}
		}
	}
	for i := 0; i < B*T; i++ {
		copy(dqkv[i*W+d.Cl:(i+1)*W], dIn[i*KV2:(i+1)*KV2])
	}
	return nil
}

// ringBlockBackward accumulates block src's contributions: dQ into dqkv's
// query columns, dK and dV into dkv (rows of 2·KV', kv's layout), per
// tile by ops.AttentionTileBackward.
func (m *GPT) ringBlockBackward(dqkv, dkv, dout, qkv, kv, lse, D []float32, src, B int) {
	t0 := time.Now()
	defer func() { m.work.Compute += time.Since(t0) }()
	d, T, c := m.d, m.T, m.split.c
	W, KV2, grp := d.qkvW(), 2*d.KVl, d.NH/d.KV
	for b := 0; b < B; b++ {
		for h := 0; h < d.NH; h++ {
			g := h / grp
			m.pairs(src, func(cq, ck int, diag bool) {
				m.work.Pairs += pairWork(diag)
				ri, ko := (b*d.NH+h)*T+cq*c, (b*T+ck*c)*KV2+g*d.HS
				m.k.AttentionTileBackward(m.tile(qkv, kv, b, h, g, cq, ck, diag), dout[(b*T+cq*c)*d.Cl+h*d.HS:], d.Cl,
					lse[ri:ri+c], D[ri:ri+c], dqkv[(b*T+cq*c)*W+h*d.HS:], W, dkv[ko:], dkv[ko+d.KVl:], KV2, m.ring.s1, m.ring.s2)
			})
		}
	}
}
