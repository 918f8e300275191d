package model

import (
	"fmt"

	"trellis/arch"
	"trellis/device"
	"trellis/fp8"
	"trellis/precision"
	"trellis/tensor"
)

// q8 is an fp8 runner's state (precision.FP8): the linear layers' GEMMs
// read their operands quantised by package fp8 and dequantised exactly
// into bf16 scratch, so the bf16 GEMM with fp32 accumulation computes
// what an fp8 GEMM computes. For y = x·Wᵀ (x (N, in), W (out, in)):
//
//	                 delayed (per tensor)     blockwise (DeepSeek-V3, tile τ)
//	y  = x̂·Ŵᵀ        x e4m3, W e4m3           x 1×τ, W τ×τ, e4m3
//	dx = d̂y·Ŵ        dy e5m2                  dy 1×τ, e4m3
//	dW += d̂yᵀ·x̂      dy e5m2, x e4m3          dy τ×1, x τ×1, e4m3
//
// each operand tiled along its GEMM's reduction dimension. Delayed
// scaling's scale is the tensor's History's for the step (the same in all
// three GEMMs); in the first step, before any history, each quantisation
// is scaled by the tensor's current amax (its maximum over the
// tensor-parallel group), so that step is not spent on scale 1 (which
// flushes small gradients to zero) and every plan computes the one
// device's values. Blockwise scales come from each tile's own amax. The
// output head stays in bf16 (linear.hp).
type q8 struct {
	f       precision.Float8
	x, d, w []uint16  // bf16: two activation operands (B·T, widest) and a weight
	tmp     []float32 // fp8.Quantise's scratch
	hist    []*fp8.History
	vec     []float32 // delayed: the step's amaxes, reduced over ranks
	layer   int       // the block the passes are in
	observe bool      // a training pass: record amaxes
	err     error
	bufs    []*device.Buffer
}

// A block's linear layers, by their place (linear.site): each operand of
// each has its own history. (They were once told apart by shape, which a
// Llama's qkv and gate|up GEMMs can share — 48→80 in the tests' model —
// so the two shared one history and the larger amax's scale.)
const (
	siteAttnIn  = iota // attention's qkv projection
	siteAttnOut        // attention's output projection
	siteMLPIn          // the MLP's fc, or SwiGLU's gate|up
	siteMLPOut         // the MLP's output projection (SwiGLU's down)
	linearsPerBlock
)

// The operands of a linear layer's GEMMs.
const (
	roleX = iota
	roleW
	roleD
	roles
)

// allocQ8 allocates the fp8 scratch (workspace) and, under delayed
// scaling, every block's amax histories (param: the runner can run any
// block).
func (m *GPT) allocQ8() error {
	f := m.pol.F8
	if f.Recipe == precision.NoFP8 {
		return nil
	}
	q := &q8{f: f}
	fail := func(err error) error {
		q.free()
		return fmt.Errorf("model: fp8 scratch: %w", err)
	}
	sz := m.cfg.FP8Workspace(m.d.arch(m.B, m.cfg.SeqLen))
	b16, err := m.dev.AllocOf(device.Workspace, tensor.BF16, int(sz.Acts+sz.Weight))
	if err != nil {
		return fail(err)
	}
	q.bufs = append(q.bufs, b16)
	a := int(sz.Acts) / 2
	q.x, q.d, q.w = b16.Bits[:a:a], b16.Bits[a:2*a:2*a], b16.Bits[2*a:]
	b32, err := m.dev.Alloc(device.Workspace, int(sz.Tmp))
	if err != nil {
		return fail(err)
	}
	q.bufs = append(q.bufs, b32)
	q.tmp = b32.Data
	if f.Recipe == precision.Delayed {
		n := m.cfg.Layers * linearsPerBlock * roles
		hb, err := m.dev.Alloc(device.Param, int(arch.FP8HistoryBytes(m.cfg.Layers, f.History)/4))
		if err != nil {
			return fail(err)
		}
		q.bufs = append(q.bufs, hb)
		L := fp8.Len(f.History)
		for i := 0; i < n; i++ {
			fm := fp8.E4M3
			if i%roles == roleD {
				fm = fp8.E5M2
			}
			q.hist = append(q.hist, fp8.NewHistory(fm, f.Margin, hb.Data[i*L:(i+1)*L]))
		}
		q.vec = make([]float32, n) // the reduction's payload: 12 values a block
	}
	m.q8 = q
	return nil
}

func (q *q8) free() {
	if q == nil {
		return
	}
	for _, b := range q.bufs {
		b.Free()
	}
	q.bufs = nil
}

// at tells the fp8 state which block the passes run (train: whether
// they record amaxes).
func (m *GPT) at(l int, train bool) {
	if m.q8 != nil {
		m.q8.layer, m.q8.observe = l, train
	}
}

// quant is operand role of linear l (rows×cols, row-major) quantised
// into dst, tiled by tile under the blockwise recipe.
func (m *GPT) quant(l linear, role int, dst []uint16, src tensor.Buf, rows, cols int, tile fp8.Tile) tensor.Buf {
	q, n := m.q8, rows*cols
	f, scale := fp8.E4M3, float32(0)
	var h *fp8.History
	if q.f.Recipe == precision.Delayed {
		h = q.history(l, role)
		f, scale, tile = h.Format(), h.Scale(), fp8.Tile{R: rows, C: cols}
		if !h.Recorded() {
			scale = fp8.Scale(f, m.tensorAMax(src, n), q.f.Margin)
		}
	}
	amax := fp8.Quantise(dst[:n], src.Head(n), rows, cols, tile, f, scale, q.tmp)
	if h != nil && q.observe {
		h.Observe(amax)
	}
	return tensor.Halves(tensor.BF16, dst[:n:n])
}

// tensorAMax is the amax of the whole tensor whose rank's piece (or
// micro-batch) src is: its maximum over the tensor-parallel group. (Over
// data-parallel ranks a micro-batch's tensor is its own, as on one
// device.) An error of the reduction is the step's, reported by FP8Sync.
func (m *GPT) tensorAMax(src tensor.Buf, n int) float32 {
	q := m.q8
	q.tmp[0] = fp8.AMax(src, n)
	if err := m.tp.MaxOverTP(q.tmp[:1]); err != nil && q.err == nil {
		q.err = err
	}
	return q.tmp[0]
}

// history is the delayed-scaling state of operand role of linear l in
// the current block.
func (q *q8) history(l linear, role int) *fp8.History {
	return q.hist[(q.layer*linearsPerBlock+l.site)*roles+role]
}

// tile is the blockwise recipe's tile edge.
func (q *q8) tile() int { return q.f.Tile }

// fwd8 is the forward GEMM's operands of l (x (N, in), w (out, in)).
func (l linear) fwd8(m *GPT, x, w tensor.Buf, N int) (tensor.Buf, tensor.Buf) {
	if m.q8 == nil || l.hp {
		return x, w
	}
	t := m.q8.tile()
	return m.quant(l, roleX, m.q8.x, x, N, l.in, fp8.Tile{R: 1, C: t}), m.quant(l, roleW, m.q8.w, w, l.out, l.in, fp8.Tile{R: t, C: t})
}

// dgrad8 is the input gradient's operands (dy (N, out), w (out, in)).
func (l linear) dgrad8(m *GPT, dy, w tensor.Buf, N int) (tensor.Buf, tensor.Buf) {
	if m.q8 == nil || l.hp {
		return dy, w
	}
	t := m.q8.tile()
	return m.quant(l, roleD, m.q8.d, dy, N, l.out, fp8.Tile{R: 1, C: t}), m.quant(l, roleW, m.q8.w, w, l.out, l.in, fp8.Tile{R: t, C: t})
}

// wgrad8 is the weight gradient's operands (dy (N, out), x (N, in)),
// tiled along the tokens.
func (l linear) wgrad8(m *GPT, dy, x tensor.Buf, N int) (tensor.Buf, tensor.Buf) {
	if m.q8 == nil || l.hp {
		return dy, x
	}
	t := m.q8.tile()
	return m.quant(l, roleD, m.q8.d, dy, N, l.out, fp8.Tile{R: t, C: 1}), m.quant(l, roleX, m.q8.x, x, N, l.in, fp8.Tile{R: t, C: 1})
}

// FP8Sync ends a training step under delayed scaling: every tensor's
// amax of the step, reduced by reduce (the maximum over the ranks that
// hold pieces or micro-batches of the same tensors: the data- and
// tensor-parallel groups; every rank passes the same L·4·3 values in the
// same order), joins its history, which makes the next step's scales. It
// does nothing under other policies.
func (m *GPT) FP8Sync(reduce func([]float32) error) error {
	if m.q8 == nil || m.q8.f.Recipe != precision.Delayed {
		return nil
	}
	q := m.q8
	if err := q.err; err != nil {
		q.err = nil
		return fmt.Errorf("model: fp8 amax reduction: %w", err)
	}
	for i, h := range q.hist {
		q.vec[i] = *h.Current()
	}
	if reduce != nil {
		if err := reduce(q.vec); err != nil {
			return fmt.Errorf("model: fp8 amax reduction: %w", err)
		}
	}
	for i, h := range q.hist {
		*h.Current() = q.vec[i]
		h.Roll()
	}
	return nil
}

// FP8HistoryLen is the steps of amax history a delayed-scaling runner
// keeps per tensor, H (0 under other policies: nothing to checkpoint).
func (m *GPT) FP8HistoryLen() int {
	if m == nil || m.q8 == nil || m.q8.f.Recipe != precision.Delayed {
		return 0
	}
	return m.q8.f.History
}

// FP8Sites is the number of histories a block keeps: its 4 linear layers
// (attention in and out, MLP in and out) × 3 operands (x, w, dy), in that
// order, site-major.
const FP8Sites = linearsPerBlock * roles

// FP8History is block l's delayed-scaling state between steps, for a
// checkpoint: amax (FP8Sites·H fp32s) gets each history's last H step
// amaxes oldest first (fp8.History.Save), scale (FP8Sites) its next
// step's scale, in FP8Sites order. The amaxes are maxima over the data-
// and tensor-parallel groups (FP8Sync), so the state is the whole
// tensors' and the same on every rank that runs the block: the one
// device's, whatever the plan.
func (m *GPT) FP8History(l int, amax, scale []float32) error {
	H := m.FP8HistoryLen()
	if err := m.checkFP8History(l, H, amax, scale); err != nil {
		return err
	}
	for i, h := range m.q8.hist[l*FP8Sites : (l+1)*FP8Sites] {
		scale[i] = h.Save(amax[i*H : (i+1)*H])
	}
	return nil
}

// SetFP8History restores block l's state saved by FP8History after steps
// steps, from histories of len(amax)/FP8Sites steps (another length than
// the runner's keeps the newest and remakes the scales: fp8.History.Load).
// The dy histories' amaxes are multiplied by dy, the ratio of a
// micro-batch's loss gradient under this run to the saving run's (the
// caller's: 1 under the same plan), and with dy ≠ 1 or remake (a changed
// margin) every scale is remade from its history (fp8.History.Remake).
// amax is scaled in place.
func (m *GPT) SetFP8History(l int, amax, scale []float32, steps int, dy float32, remake bool) error {
	H := len(amax) / FP8Sites
	if err := m.checkFP8History(l, H, amax, scale); err != nil {
		return err
	}
	for i, h := range m.q8.hist[l*FP8Sites : (l+1)*FP8Sites] {
		a := amax[i*H : (i+1)*H]
		if i%roles == roleD && dy != 1 {
			for j := range a {
				a[j] *= dy
			}
		}
		h.Load(a, scale[i], steps)
		if (remake || dy != 1) && steps > 0 {
			h.Remake()
		}
	}
	return nil
}

func (m *GPT) checkFP8History(l, H int, amax, scale []float32) error {
	switch {
	case m.FP8HistoryLen() == 0:
		return fmt.Errorf("model: fp8 history of block %d: the runner has no delayed scaling", l)
	case l < 0 || l >= m.cfg.Layers:
		return fmt.Errorf("model: fp8 history of block %d out of range [0, %d)", l, m.cfg.Layers)
	case H < 1 || len(amax) != FP8Sites*H || len(scale) != FP8Sites:
		return fmt.Errorf("model: fp8 history of block %d: %d amaxes and %d scales, want %d·H (H >= 1) and %d", l, len(amax), len(scale), FP8Sites, FP8Sites)
	}
	return nil
}
