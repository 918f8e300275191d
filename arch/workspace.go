package arch

// Workspace is the element count of each slice of the passes' scratch
// (package model carves it, tag workspace; the planner charges the same
// sizes): fp32 but for X and Dy, 16-bit values.
type Workspace struct {
	Dres, Dln, Big, Scratch, Branch float64
	Gath, Dlnl, LnGrad, CE          float64
	Vec, Rope                       float64
	Ring                            float64 // cp > 1: the ring attention's fp32 scratch (RingElems)
	X, Dy                           float64 // 16-bit
	RingH                           float64 // 16-bit, cp > 1: the key/value blocks on the wire (RingElems)
	// An MoE layer's scratch (MoEScratch): Moe fp32, MoeDy 16-bit, Route int32.
	Moe, MoeDy, Route float64
}

// F32 is the count of fp32 elements.
func (w Workspace) F32() float64 {
	return w.Dres + w.Dln + w.Big + w.Scratch + w.Branch + w.Gath + w.Dlnl + w.LnGrad + w.CE + w.Vec + w.Rope + w.Ring + w.Moe
}

// Bytes is what the workspace tag holds: 4 per fp32 element, 2 per 16-bit one.
func (w Workspace) Bytes() float64 { return 4*w.F32() + 2*(w.X+w.Dy+w.MoeDy+w.RingH) + 4*w.Route }

// Workspace sizes the scratch of passes of micro-batches of d.B sequences
// of d.T tokens on part d.Part (n = B·T, B·T/t with SP; t the
// tensor-parallel degree; C' F NH' V' a rank's widths), under a 16-bit
// policy when half, with attnWorkers goroutines for the materialising
// attention's backward:
//
//	dres n·C          the residual stream's gradient
//	dln  B·T·C        a norm output's gradient (a column layer's full input gradient)
//	big  max(B·T·V', M) and with t > 1 at least B·T·C and (t+1)·V'
//	                  dlogits; the MLP's, then attention's gradients; a
//	                  16-bit forward's GEMM outputs. M is GPT-2's 2·B·T·F
//	                  (dfcg, dfc; attention's 8·B·T·C' fits), a Llama's
//	                  max(3·B·T·F', 2·B·T·(Q'+2·KV') + 2·B·T·Q') (dact and
//	                  dgate_up; dqkv, qkv widened, the core's output and its
//	                  gradient)
//	scratch           the materialising attention backward's (T,T) per worker (flash: 0)
//	branch n·C        a residual branch before dropout, or its gradient (with dropout or t > 1)
//	ce   3·B·T        t > 1: the vocab-parallel loss's row max, sum and target logit
//	gath B·T·C, dlnl n·C, lnGrad 2C     SP: a gathered norm output or branch
//	                  gradient, the rank's tokens of a reduced one, a norm's
//	                  parameter gradients summed over the group
//	rope T·HS         a Llama's RoPE table: cos and sin of (T, HS/2) angles
//
// and under a 16-bit policy x B·T·C with SP (a gathered 16-bit operand)
// and dy B·T·max(C, F, V') (a GEMM's rounded output gradient; a Llama's
// widest is max(C, 2F', Q'+2·KV', V')), 2 bytes each, plus vec fp32 (a
// unit's vectors widened: GPT-2's 13C — a block's 7C + 3C' + F, or ln_f's
// 2C —, a Llama's 2C). For GPT-2 with t = 1 in fp32: 2·BTC + max(BTV,
// 8·BTC) + scratch (+ BTC with dropout). Under cp > 1 the scratch is 0
// and ring, ringH are RingElems' (ringH 16-bit). A model with MoE layers adds
// MoEScratch's (moe, moeDy, route) and counts its shared experts' SwiGLU
// (width F_s) in big and dy as the dense one's. In float64, so that the estimate
// a job is refused by before anything is allocated cannot overflow.
func (c Config) Workspace(d Dims, half bool, attnWorkers float64) Workspace {
	t := float64(d.Part.Degree())
	BT := float64(d.B) * float64(d.T)
	C, T := float64(c.Hidden), float64(d.T)
	V := float64(d.Part.VocabRows(c))
	n := d.tokensF()
	BTC := BT * C
	var mid, dyw, vec float64
	if c.IsLlama() {
		Q, KV, F, _, _ := c.llamaLocal(d.Part)
		mid = max(3*BT*F, 2*BT*(Q+2*KV)+2*BT*Q)
		dyw, vec = max(C, 2*F, Q+2*KV, V), 2*C
		if _, fs := c.ExpertLocal(d.Part); fs > 0 && c.MoELayers(0, c.Layers) > 0 { // the shared experts' SwiGLU runs as the dense one
			Fs := float64(fs)
			mid, dyw = max(mid, 3*BT*Fs), max(dyw, 2*Fs)
		}
	} else {
		_, F, _, _ := c.localF(d.Part)
		mid = 2 * BT * F
		dyw, vec = max(C, F, V), 13*C
	}
	w := Workspace{Dres: n * C, Dln: BTC, Big: max(BT*V, mid)}
	if !d.Flash {
		w.Scratch = attnWorkers * T * T
	}
	if c.Dropout > 0 || t > 1 {
		w.Branch = n * C
	}
	if t > 1 {
		w.Big = max(w.Big, BTC, (t+1)*V) // the last: Logits' gathered row
		w.CE = 3 * BT
	}
	if d.Part.SP {
		w.Gath, w.Dlnl, w.LnGrad = BTC, n*C, 2*C
	}
	if c.IsLlama() {
		w.Rope = T * float64(c.HeadSize())
	}
	if d.CP > 1 {
		w.Scratch = 0
		w.Ring, w.RingH = c.RingElems(d, half)
	}
	if half {
		if d.Part.SP {
			w.X = BTC
		}
		w.Dy = BT * dyw
		w.Vec = vec
	}
	mw := c.MoEScratch(d, half)
	w.Moe, w.MoeDy, w.Route = mw.F32, mw.Half, mw.Route
	return w
}

// RingElems is the ring attention's scratch under context parallelism
// (d.CP > 1, d.T the rank's T/cp tokens in two chunks of c = T/2), fp32
// and 16-bit. In fp32: six key/value blocks of B·T·2KV' (the block held
// and the one arriving; in the backward the arriving accumulated dK,dV,
// this rank's contribution and two outgoing sums), two (c, c) score
// tiles (S or P, and dP), the running row maxima and sums (forward) or
// the rows' D = rowsum(dO⊙O) and a spare (backward), B·NH'·T each:
//
//	ring = 6·B·T·2KV' + 2c² + 2·B·NH'·T                 ringH = 0
//
// Under a 16-bit policy (half) the keys and values travel in the compute
// dtype: the block arriving is two 16-bit blocks (the one sent and the one
// received) instead of an fp32 one, the same bytes:
//
//	ring = 5·B·T·2KV' + 2c² + 2·B·NH'·T                 ringH = 2·B·T·2KV'
func (c Config) RingElems(d Dims, half bool) (f32, h16 float64) {
	if d.CP <= 1 {
		return 0, 0
	}
	var KV, NH float64
	if c.IsLlama() {
		_, KV, _, NH, _ = c.llamaLocal(d.Part)
	} else {
		KV, _, NH, _ = c.localF(d.Part)
	}
	BT, ch := float64(d.B)*float64(d.T), float64(d.T/2)
	blk := BT * 2 * KV
	if half {
		return 5*blk + 2*ch*ch + 2*BT*NH, 2 * blk
	}
	return 6*blk + 2*ch*ch + 2*BT*NH, 0
}
