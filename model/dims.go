package model

import "trellis/ops"

// dims are a rank's local sizes under its Part (t = 1: the whole model).
type dims struct {
	t, r    int
	sp      bool
	C, Cl   int       // model width and the rank's attention width C' = C/t
	F       int       // the rank's MLP width 4C/t
	NH      int       // the rank's heads NH/t
	Vl      int       // wte rows held, V' = ⌈V/t⌉ (padding included)
	vlo, vn int       // the global ids [vlo, vlo+vn) of the real rows
	flash   bool      // IO-aware attention (Options.Flash)
	rc      Recompute // activation recomputation (Options.Recompute)
	half    bool      // a 16-bit stash (stash16.go): Options.Compute is bf16 or fp16
}

// attFloats is what one layer's attention keeps for its backward: the
// (B,NH',T,T) probabilities, or with flash the (B,NH',T) log-sum-exps.
func (d dims) attFloats(B, T int) int {
	if d.flash {
		return B * d.NH * T
	}
	return B * d.NH * T * T
}

// attnScratch is the materialising backward's (T,T) scratch per worker;
// flash needs none.
func (d dims) attnScratch(k *ops.Kernels, B, T int) int {
	if d.flash {
		return 0
	}
	return ops.AttentionScratchSize(k, B, T, d.NH)
}

func newDims(c Config, p Part) dims {
	t := p.Degree()
	d := dims{t: t, r: p.Rank, sp: p.SP, C: c.Hidden, Cl: c.Hidden / t, F: 4 * c.Hidden / t, NH: c.Heads / t, Vl: p.VocabRows(c)}
	d.vlo, d.vn = p.vocabRange(c)
	return d
}

// tokens is the number of tokens of a (b·n)-token pass the rank's
// LayerNorm, dropout and residual regions hold: b·n, or b·n/t with SP.
func (d dims) tokens(bn int) int {
	if d.sp {
		return bn / d.t
	}
	return bn
}

// tpScratch are the tensor-parallel buffers of the workspace.
type tpScratch struct {
	gath   []float32 // (B,T,C) SP: a gathered LayerNorm output or branch gradient
	dlnl   []float32 // (B·T/t,C) SP: the rank's tokens of a LayerNorm output's gradient
	lnGrad []float32 // (2C) SP: one micro-batch's LayerNorm parameter gradients, summed over the group
	ce     []float32 // (3·B·T) the vocab-parallel loss's row max, sum of exps and target logit
}

// wsSizes are the workspace's slices, in elements.
type wsSizes struct {
	dres, dln, big, scratch, branch int
	gath, dlnl, lnGrad, ce          int
}

func (s wsSizes) total() int {
	return s.dres + s.dln + s.big + s.scratch + s.branch + s.gath + s.dlnl + s.lnGrad + s.ce
}

// workspace sizes the backward scratch for micro-batches of B:
//
//	dres n·C, dln BTC, big max(BT·V', 2·BT·F, BTC), attention scratch,
//	branch n·C (with dropout or t > 1), and with t > 1: ce 3·BT, and with
//	SP also gath BTC, dlnl n·C, lnGrad 2C
//
// where n = BT (BT/t with SP). With t = 1: 2·BTC + max(BTV, 8·BTC) +
// scratch (+ BTC with dropout), as before tensor parallelism.
func (d dims) workspace(k *ops.Kernels, B int, c Config) wsSizes {
	BT := B * c.SeqLen
	BTC, n := BT*d.C, d.tokens(BT)
	s := wsSizes{dres: n * d.C, dln: BTC, big: max(BT*d.Vl, 2*BT*d.F), scratch: d.attnScratch(k, B, c.SeqLen)}
	if c.Dropout > 0 || d.t > 1 {
		s.branch = n * d.C
	}
	if d.t > 1 {
		s.big = max(s.big, BTC, (d.t+1)*d.Vl) // the last: Logits' gathered row
		s.ce = 3 * BT
	}
	if d.sp {
		s.gath, s.dlnl, s.lnGrad = BTC, n*d.C, 2*d.C
	}
	return s
}

// halfScratch is mixed precision's 16-bit GEMM operand scratch for a
// pass of bt tokens, in elements: the activation operand x, which the
// GEMMs read from the 16-bit stash except under SP, where a
// column-parallel layer's input is the gathered (bt, C) LayerNorm output,
// and the output gradient dy, the widest output (C, F = 4C/t, or the
// rank's V' vocabulary rows):
//
//	x  bt·C with SP, else 0      dy  bt·max(C, F, V')
//
// With t = 1, 0 and bt·max(4C, V).
func (d dims) halfScratch(bt int) [2]int {
	nx := 0
	if d.sp {
		nx = bt * d.C
	}
	return [2]int{nx, bt * max(d.C, d.F, d.Vl)}
}
