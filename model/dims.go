package model

import (
	"trellis/arch"
	"trellis/ops"
)

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
	half    bool      // 16-bit compute and stash (the policy's)
}

func newDims(c Config, p Part) dims {
	t := p.Degree()
	d := dims{t: t, r: p.Rank, sp: p.SP, C: c.Hidden, Cl: c.Hidden / t, F: 4 * c.Hidden / t, NH: c.Heads / t, Vl: p.VocabRows(c)}
	d.vlo = p.Rank * d.Vl
	d.vn = max(0, min(d.Vl, c.Vocab-d.vlo))
	return d
}

// arch is the declarations' view of a pass of b sequences of T tokens.
func (d dims) arch(b, T int) arch.Dims {
	return arch.Dims{B: b, T: T, Part: Part{TP: d.t, Rank: d.r, SP: d.sp}, Flash: d.flash, Recompute: d.rc}
}

// sharesProbs says whether the layers of a stash share one
// attention-core buffer (selective recomputation of materialised
// probabilities; see arch.Recompute).
func (d dims) sharesProbs() bool { return d.rc == RecomputeSelective && !d.flash }

// tokens is the number of tokens of a (b·n)-token pass the rank's norm,
// dropout and residual regions hold: b·n, or b·n/t with SP.
func (d dims) tokens(bn int) int {
	if d.sp {
		return bn / d.t
	}
	return bn
}

// wsSizes are the backward scratch's slices, in elements (fp32 unless
// noted).
type wsSizes[N int | float64] struct {
	dres, dln, big, scratch, branch N
	gath, dlnl, lnGrad, ce          N
	x, dy                           N // 16-bit: SP's gathered operand, a GEMM's output gradient
	vec                             N // 16-bit: a unit's vectors widened
}

func (s wsSizes[N]) f32() N {
	return s.dres + s.dln + s.big + s.scratch + s.branch + s.gath + s.dlnl + s.lnGrad + s.ce + s.vec
}

// bytes is what the workspace tag holds: 4 per fp32 element, 2 per 16-bit one.
func (s wsSizes[N]) bytes() N { return 4*s.f32() + 2*(s.x+s.dy) }

// workspace sizes the scratch of passes of micro-batches of B sequences
// (n = B·T, B·T/t with SP; t the tensor-parallel degree):
//
//	dres n·C          the residual stream's gradient
//	dln  B·T·C        a norm output's gradient (a column layer's full input gradient)
//	big  max(B·T·V', 2·B·T·F) and with t > 1 at least B·T·C and (t+1)·V'
//	                  dlogits; the MLP's, then attention's gradients; a
//	                  16-bit forward's GEMM outputs (gpt2.go carves it)
//	scratch           the materialising attention backward's (T,T) per worker (flash: 0)
//	branch n·C        a residual branch before dropout, or its gradient (with dropout or t > 1)
//	ce   3·B·T        t > 1: the vocab-parallel loss's row max, sum and target logit
//	gath B·T·C, dlnl n·C, lnGrad 2C     SP: a gathered norm output or branch
//	                  gradient, the rank's tokens of a reduced one, a norm's
//	                  parameter gradients summed over the group
//
// and under a 16-bit policy x B·T·C with SP (a gathered 16-bit operand)
// and dy B·T·max(C, F, V') (a GEMM's rounded output gradient), 2 bytes
// each, plus vec 13C fp32 (a unit's vectors widened: a block's 7C + 3C' +
// F, or ln_f's 2C). With t = 1 in fp32: 2·BTC + max(BTV, 8·BTC) + scratch
// (+ BTC with dropout). It is generic so that the same formula sizes the
// buffers (int) and the estimate a job is refused by before anything is
// allocated (float64, WorkspaceBytes), which must not overflow.
func workspace[N int | float64](c Config, d dims, B, attnWorkers N) wsSizes[N] {
	T, C, V, t := N(c.SeqLen), N(d.C), N(d.Vl), N(d.t)
	BT := B * T
	BTC, n := BT*C, BT
	if d.sp {
		n = BT / t
	}
	s := wsSizes[N]{dres: n * C, dln: BTC, big: max(BT*V, 2*BT*N(d.F))}
	if !d.flash {
		s.scratch = attnWorkers * T * T
	}
	if c.Dropout > 0 || d.t > 1 {
		s.branch = n * C
	}
	if d.t > 1 {
		s.big = max(s.big, BTC, (t+1)*V) // the last: Logits' gathered row
		s.ce = 3 * BT
	}
	if d.sp {
		s.gath, s.dlnl, s.lnGrad = BTC, n*C, 2*C
	}
	if d.half {
		if d.sp {
			s.x = BTC
		}
		s.dy = BT * max(C, N(d.F), V)
		s.vec = 13 * C
	}
	return s
}

// attnWorkers is the materialising attention's worker count on k for B
// sequences of the rank's heads (ops.AttentionScratchSize's).
func attnWorkers(k ops.Backend, B, NH int) int { return max(1, min(k.Threads(), B*NH)) }

// WorkspaceBytes is what New charges to the workspace tag for
// micro-batches of B on one device (t = 1) with flash on or off, fp32 or
// 16-bit, when attention runs on attnWorkers goroutines: workspace's
// formula in float64, for any configuration, valid or not.
func WorkspaceBytes(c Config, B, attnWorkers int, flash, half bool) float64 {
	d := dims{t: 1, C: c.Hidden, Cl: c.Hidden, F: 4 * c.Hidden, NH: c.Heads, Vl: c.Vocab, flash: flash, half: half}
	return workspace(c, d, float64(B), float64(max(1, attnWorkers))).bytes()
}

// RunnerBytes is what New and one NewStash charge to a device for
// micro-batch B on one device in fp32 without flash or recomputation:
// the scratch (WorkspaceBytes) and the whole model's stash (arch's
// declarations) with its two (B,T) int32 token arrays, in float64 for any
// configuration.
func RunnerBytes(c Config, B, attnWorkers int) float64 {
	d := arch.Dims{B: B, T: c.SeqLen}
	return WorkspaceBytes(c, B, attnWorkers, false, false) + c.StageStash(d, c.Layers, true, false).Bytes() + d.TokenBytes()
}
