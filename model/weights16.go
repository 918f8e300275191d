package model

import (
	"math"

	"trellis/tensor"
)

// Weights in 16-bit. Under Options.Compute = bf16 or fp16 (on whole
// layers; a tensor-parallel rank likewise, tp16.go), every weight the passes read is its 16-bit rounding r(w): the
// linear layers' matrices and the tied LM head through the compute copy
// (half.go), and the rest — LayerNorm gains and biases, the linear
// layers' biases, the embedding rows looked up — rounded as they are read
// (halfBlockView, halfVec, embedForwardHalf). The passes therefore
// compute on r(w) whatever fp32 weights the Params hand out: the master
// weights themselves (single, dp, ZeRO-3), or, under ZeRO-1/2 with
// sharded master weights, r(master) gathered in 16-bit and widened
// (parallel/zero), which rounds to itself — so both give the same bits.
// The gradients are those of r(w), accumulated in fp32 into the master
// weights' gradients, as in Megatron's mixed precision.

// rounder is r for the runner's 16-bit type.
func (m *GPT) rounder() func(float32) float32 {
	if m.half.dt == tensor.F16 {
		return func(x float32) float32 { return tensor.ToF16(x).Float32() }
	}
	return func(x float32) float32 { return tensor.ToBF16(x).Float32() }
}

// halfVec sets dst[i] = r(src[i]) and returns dst[:len(src)].
func (m *GPT) halfVec(dst, src []float32) []float32 {
	r := m.rounder()
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = r(x)
	}
	return dst
}

// halfBlockView is the runner's block view of w (viewBlockPart: a
// tensor-parallel rank's part, the whole block at t = 1) with its eight
// vectors (LayerNorm gains and biases, linear biases: 13C values whole,
// 7C + 3C' + F on a part) replaced by their roundings, in the runner's vec
// scratch; the matrices stay views of w, which the GEMMs read through the
// compute copy (halfOf).
func (m *GPT) halfBlockView(w []float32) blockView {
	v := viewBlockPart(w, m.d.C, m.d.t)
	buf := m.half.vec
	next := func(src []float32) []float32 {
		d := m.halfVec(buf, src)
		buf = buf[len(src):]
		return d
	}
	v.ln1w, v.ln1b, v.qkvb, v.projb = next(v.ln1w), next(v.ln1b), next(v.qkvb), next(v.projb)
	v.ln2w, v.ln2b, v.fcb, v.fc2b = next(v.ln2w), next(v.ln2b), next(v.fcb), next(v.fc2b)
	return v
}

// embedForwardHalf is ops.EncoderForward on the rounded tables, read
// from the compute copy of unit 0 (wte and wpe fetched by m.weights):
//
//	out[b,t,:] = r(wte[inp[b,t],:]) + r(wpe[t,:])
func (m *GPT) embedForwardHalf(out []float32, inp []int32, wte, wpe []float32, B, T, C int) {
	we, pe := m.halfOf(wte), m.halfOf(wpe)
	f16 := m.half.dt == tensor.F16
	m.k.Parallel(B*T, func(lo, hi int) {
		for bt := lo; bt < hi; bt++ {
			ix, t := int(inp[bt]), bt%T
			o, a, b := out[bt*C:bt*C+C], we[ix*C:ix*C+C], pe[t*C:t*C+C]
			if f16 {
				for i := range o {
					o[i] = tensor.F16Bits(a[i]).Float32() + tensor.F16Bits(b[i]).Float32()
				}
				continue
			}
			for i := range o {
				o[i] = math.Float32frombits(uint32(a[i])<<16) + math.Float32frombits(uint32(b[i])<<16)
			}
		}
	})
}

// halfLinearHead is the LM head's logits of one row in the runner's
// precision, for Logits: dst = x·wteᵀ with x a 16-bit stash row.
func (m *GPT) halfLinearHead(dst []float32, x []uint16, wte []float32) {
	c := m.cfg
	m.linearForwardH(dst, nil, x, wte[:c.Vocab*c.Hidden], nil, 1, c.Hidden, c.Vocab)
}
