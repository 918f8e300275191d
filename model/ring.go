package model

import (
	"fmt"
	"math"
	"time"

	"trellis/comm"
	"trellis/device"
	"trellis/ops"
	"trellis/tensor"
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
//
// What travels, per layer and micro-batch, in blocks of B·(T/cp)·2·KV'
// values (a rank's keys and values, KV' = KV/t):
//
//	forward    cp−1 key/value blocks, in the compute dtype
//	backward   cp−1 key/value blocks, in the compute dtype, and cp sums
//	           of dK, dV in fp32 (the last one after the last step's
//	           compute, exposed whole)
//
// and the forward's again when the backward recomputes it (full
// recomputation, or selective without flash, which reruns the core).
// Under a 16-bit policy the keys and values are sent as the 16-bit values
// the stash holds: the forward rounds qkv into the stash and goes on from
// the rounded values (keep), the backward widens the same bits, so the
// fp32 block the ring computes with holds 16-bit values exactly and its
// 16-bit wire form (Encode, then Decode at the receiver) is lossless:
// 16-bit results are those of an fp32 wire, and the fp32 path moves the
// fp32 blocks as before. As in Megatron's and Transformer Engine's ring
// attention, K and V travel in the activation dtype. The travelling dK,
// dV sums stay fp32 here, where TE's p2p ring sends and accumulates them
// in the activation dtype: each is a running sum over the cp ranks'
// contributions, and rounding it at every hop would add up to cp
// roundings to a gradient the single device rounds once; fp32 keeps
// cp == one device within the 16-bit plans' bound, at twice the sums'
// bytes (the planner counts them so: plan's cpRing, CPRingBytes).
const (
	tagRingKV  = 1 // the key/value blocks
	tagRingDKV = 2 // the backward's travelling dK, dV sums
)

// ringBufs are the ring's scratch (arch.Config.RingElems), carved from
// the workspace: fp32, and under a 16-bit policy the key/value blocks'
// wire form.
type ringBufs struct {
	kv     [2][]float32 // (B·T/cp, 2·KV') the block held and (fp32) the one arriving
	wire   [2][]uint16  // 16-bit: the block held, sent, and the one arriving (nil in fp32)
	wireDT tensor.DType // the 16-bit dtype of wire
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

func (m *GPT) carveRing(buf []float32, half []uint16) {
	d := m.d
	blk, rows, c := m.B*m.T*2*d.KVl, m.B*d.NH*m.T, m.split.c
	next := func(n int) []float32 {
		s := buf[:n:n]
		buf = buf[n:]
		return s
	}
	r := &m.ring
	r.kv[0] = next(blk)
	if len(half) > 0 {
		r.wire[0], r.wire[1], r.wireDT = half[:blk:blk], half[blk:2*blk:2*blk], m.pol.Compute
	} else {
		r.kv[1] = next(blk)
	}
	r.dIn, r.dLoc, r.dOut[0], r.dOut[1] = next(blk), next(blk), next(blk), next(blk)
	r.s1, r.s2, r.rowA, r.rowB = next(c*c), next(c*c), next(rows), next(rows)
}

// kvRing is a pass's key/value blocks going round: cur the block held
// (fp32, what the tiles read), and under a 16-bit policy its wire form.
type kvRing struct {
	m         *GPT
	cur, nxt  []float32 // fp32: nxt receives
	send, arr []uint16  // 16-bit: cur's bits sent, and the block arriving
}

// startKV packs the rank's own keys and values from qkv (B·T' rows) into
// the block held (and its exact 16-bit form under a 16-bit policy).
func (m *GPT) startKV(qkv []float32, B int) kvRing {
	r := &m.ring
	blk := B * m.T * 2 * m.d.KVl
	k := kvRing{m: m, cur: r.kv[0][:blk]}
	m.packKV(k.cur, qkv, B*m.T)
	if r.wire[0] == nil {
		k.nxt = r.kv[1][:blk]
		return k
	}
	k.send, k.arr = r.wire[0][:blk], r.wire[1][:blk]
	m.k.Encode(tensor.Halves(r.wireDT, k.send), k.cur)
	return k
}

// ops are the step's transfer: receive the next block from prev, send the
// one held to next. A 16-bit block travels as its bits in a bf16 Buf (an
// fp16 one too: a point-to-point moves bits and never reduces them).
func (k *kvRing) ops(prev, next int) []comm.P2POp {
	if k.send == nil {
		return []comm.P2POp{comm.RecvOp(comm.F32(k.nxt), prev, tagRingKV), comm.SendOp(comm.F32(k.cur), next, tagRingKV)}
	}
	return []comm.P2POp{comm.RecvOp(comm.BF16(tensor.BF16View(k.arr)), prev, tagRingKV),
		comm.SendOp(comm.BF16(tensor.BF16View(k.send)), next, tagRingKV)}
}

// advance makes the block that arrived the one held, once the step's
// compute and transfer are done (16-bit: widened into cur, exactly).
func (k *kvRing) advance() {
	if k.send == nil {
		k.cur, k.nxt = k.nxt, k.cur
		return
	}
	k.m.k.Decode(k.cur, tensor.Halves(k.m.ring.wireDT, k.arr))
	k.send, k.arr = k.arr, k.send
}

// chunkOf is the global chunk index of rank r's local chunk k.
func (p cpSplit) chunkOf(r, k int) int { q := p; q.r = r; return q.chunk(k) }

// chargeRing follows the cp group's Buffered gauge — ring messages that
// arrived before this rank posted their receives, held by the transport —
// on the device's comm tag, sampled before every step's transfer is
// posted and after each pass (as a pipeline stage charges its early
// messages): the budget refuses a ring whose early messages do not fit,
// naming the bytes. Rank r−1 can be at most one ring pass ahead of rank
// r (finishing a pass needs r's first block of it, forward, or r's
// second sum, backward), so what it holds is bounded by
// (2cp−3) key/value blocks and 2cp−2 sums (train's engineBuffers).
func (m *GPT) chargeRing() error {
	b := m.cp.Stats().Buffered
	switch {
	case b > m.ringHeld:
		if err := m.dev.Reserve(device.Comm, b-m.ringHeld); err != nil {
			return fmt.Errorf("model: %d bytes of ring messages received before their receives were posted: %w", b, err)
		}
	case b < m.ringHeld:
		m.dev.Release(device.Comm, m.ringHeld-b)
	}
	m.ringHeld = b
	return nil
}

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
	kv := m.startKV(qkv, B)
	rows := B * d.NH * T
	mx, l := lse[:rows], r.rowA[:rows]
	for i := range mx {
		mx[i] = float32(math.Inf(-1))
	}
	clear(l)
	clear(out[:B*T*d.Cl])
	n, me, next, prev := m.ringPeers()
	for s := 0; s < n; s++ {
		if err := m.chargeRing(); err != nil {
			return err
		}
		var w comm.Work
		post := func() {
			if s < n-1 {
				w = comm.BatchP2P(m.cp, kv.ops(prev, next))
			}
		}
		if !m.ringSerial {
			post()
		}
		m.ringBlockForward(out, mx, l, qkv, kv.cur, (me-s+n)%n, B)
		if m.ringSerial {
			post()
		}
		if w != nil {
			if err := w.Wait(); err != nil {
				return err
			}
			kv.advance()
		}
	}
	if err := m.chargeRing(); err != nil {
		return err
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
	dIn, dLoc := r.dIn[:blk], r.dLoc[:blk]
	kv := m.startKV(qkv, B)
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
		if err := m.chargeRing(); err != nil {
			return fail(err)
		}
		var wkv, win comm.Work
		post := func() {
			if s < n-1 {
				wkv = comm.BatchP2P(m.cp, kv.ops(prev, next))
			}
			if s > 0 {
				win = m.cp.Recv(comm.F32(dIn), prev, tagRingDKV)
			}
		}
		if !m.ringSerial {
			post()
		}
		clear(dLoc)
		m.ringBlockBackward(dqkv, dLoc, dout, qkv, kv.cur, lse, D, (me-s+n)%n, B)
		if m.ringSerial {
			post()
		}
		o := r.dOut[s%2][:blk]
		if w := sent[s%2]; w != nil {
			if err := w.Wait(); err != nil {
				return fail(err)
			}
		}
		copy(o, dLoc)
		if win != nil {
			if err := win.Wait(); err != nil {
				return fail(err)
			}
			m.k.AddInto(o, dIn, blk) // dLoc + dIn, the same bits as dIn + dLoc
		}
		sent[s%2] = m.cp.Send(comm.F32(o), next, tagRingDKV)
		if wkv != nil {
			if err := wkv.Wait(); err != nil {
				return fail(err)
			}
			kv.advance()
		}
	}
	if err := m.chargeRing(); err != nil {
		return fail(err)
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
	if err := m.chargeRing(); err != nil {
		return err
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
