package model

// A 16-bit stash (Options.Compute = bf16 or fp16; on a tensor-parallel
// rank the same tensors' slices, tp16.go) keeps the activations the backward reads as GEMM operands or
// element-wise inputs in the compute dtype, 2 bytes each, and the rest
// in fp32:
//
//	16-bit  ln1 (n,C), qkv (B,T,3C'), atty (B,T,C'), ln2 (n,C),
//	        fc (B,T,F), fcg (B,T,F) per layer; lnf (n,C) in the head
//	fp32    the residual stream (its L+1 block inputs and each layer's
//	        res2), LayerNorm means and rstds, the attention probabilities
//	        (or flash's log-sum-exps), the softmax of the logits and the
//	        per-token losses
//
// ln1, atty, ln2, fcg and lnf are the inputs of linear layers whose GEMMs
// (forward and dW) round them to 16-bit anyway, so storing them rounded
// loses nothing: the forward GEMM reads them from the stash without a
// copy. qkv and fc are GEMM outputs (fp32) that feed the attention core
// and GELU; they are rounded once in the forward, and the forward itself
// goes on from the rounded values (decoded into fp32 scratch), so that the
// backward, which decodes the same bits, differentiates exactly the
// function the forward computed (and recomputation reproduces it bit for
// bit). The residual stream stays fp32 (Megatron's
// fp32_residual_connection): it accumulates every layer's branches and
// is what the LayerNorm statistics and pipeline sends are taken from.
// LayerNorm statistics, softmax and the loss stay fp32, as the issue's
// mixed precision asks. Per layer and token that is 14·C 16-bit values and
// C + 4 fp32 ones plus A (for t = 1), against 15·C + 4 + A fp32 without.

// carver hands out consecutive slices of a stash's fp32 and 16-bit
// buffers.
type carver struct {
	f []float32
	h []uint16
}

func (s *Stash) carver() *carver {
	cv := &carver{f: s.buf.Data}
	if s.half != nil {
		cv.h = s.half.Bits
	}
	return cv
}

func (c *carver) f32(n int) []float32 {
	x := c.f[:n:n]
	c.f = c.f[n:]
	return x
}

func (c *carver) f16(n int) []uint16 {
	x := c.h[:n:n]
	c.h = c.h[n:]
	return x
}

// layerHalves is one layer's 16-bit activations: 2nC + 4·BT·C' + 2·BT·F
// with a 16-bit stash (ln1, ln2, qkv, atty, fc, fcg), else none.
func (d dims) layerHalves(B, T int) int {
	if !d.half {
		return 0
	}
	BT := B * T
	return 2*d.tokens(BT)*d.C + 4*BT*d.Cl + 2*BT*d.F
}

// layersHalves is layersFloats' 16-bit part for k layers: k layers, or
// one (shared) with full recomputation; selective shares only the fp32
// probabilities.
func (d dims) layersHalves(B, T, k int) int {
	if k == 0 {
		return 0
	}
	if d.rc == RecomputeFull {
		return d.layerHalves(B, T)
	}
	return k * d.layerHalves(B, T)
}

// headHalves is the head's 16-bit activations: lnf nC with a 16-bit stash.
func (d dims) headHalves(BT int) int {
	if !d.half {
		return 0
	}
	return d.tokens(BT) * d.C
}

// stashHalves is the number of 16-bit values in a stash:
// layersHalves(L) + headHalves, 14·L·BTC + BTC for t = 1 without
// recomputation (14·BTC + BTC with full).
func (m *GPT) stashHalves() int {
	B, T := m.B, m.cfg.SeqLen
	return m.d.layersHalves(B, T, m.cfg.Layers) + m.d.headHalves(B*T)
}

// carveLayer points a at one layer's activation buffers from cv (att
// given when the layers share it).
func (m *GPT) carveLayer(a *layerActs, att []float32, cv *carver) {
	d := m.d
	B, T := m.B, m.cfg.SeqLen
	BT := B * T
	n := d.tokens(BT)
	nC := n * d.C
	if att == nil {
		att = cv.f32(d.attFloats(B, T))
	}
	a.att = att
	a.ln1M, a.ln1R, a.res2, a.ln2M, a.ln2R = cv.f32(n), cv.f32(n), cv.f32(nC), cv.f32(n), cv.f32(n)
	if d.half {
		a.ln1h, a.qkvh, a.attyh = cv.f16(nC), cv.f16(3*BT*d.Cl), cv.f16(BT*d.Cl)
		a.ln2h, a.fch, a.fcgh = cv.f16(nC), cv.f16(BT*d.F), cv.f16(BT*d.F)
		return
	}
	a.ln1, a.qkv, a.atty = cv.f32(nC), cv.f32(3*BT*d.Cl), cv.f32(BT*d.Cl)
	a.ln2, a.fc, a.fcg = cv.f32(nC), cv.f32(BT*d.F), cv.f32(BT*d.F)
}

// carveHead points the head's activations (lnf and its statistics, the
// probabilities, the losses) at buffers from cv.
func (m *GPT) carveHead(s *Stash, cv *carver) {
	d := m.d
	BT := m.B * m.cfg.SeqLen
	n := d.tokens(BT)
	s.lnf, s.lnfh = nil, nil
	if d.half {
		s.lnfh = cv.f16(n * d.C)
	} else {
		s.lnf = cv.f32(n * d.C)
	}
	s.lnfM, s.lnfR = cv.f32(n), cv.f32(n)
	s.probs, s.losses = cv.f32(BT*d.Vl), cv.f32(BT)
}
