package model

import (
	"trellis/arch"
	"trellis/ops"
)

// dims are a rank's local sizes under its Part (t = 1: the whole model).
type dims struct {
	t, r    int
	sp      bool
	C, Cl   int       // model width and the rank's attention width C' = NH'·HS (= C/t)
	KVl     int       // the rank's key (and value) width NKV'·HS (= C' without grouped-query attention)
	HS      int       // head size
	F       int       // the rank's MLP width: GPT-2's 4C/t, a Llama's F/t
	NH, KV  int       // the rank's query heads NH/t and key/value heads NKV/t
	Vl      int       // wte rows held, V' = ⌈V/t⌉ (padding included)
	vlo, vn int       // the global ids [vlo, vlo+vn) of the real rows
	flash   bool      // IO-aware attention (Options.Flash)
	rc      Recompute // activation recomputation (Options.Recompute)
	half    bool      // 16-bit compute and stash (the policy's)
	llama   bool      // the Llama block (RMSNorm, RoPE, grouped-query attention, SwiGLU)
	tied    bool      // the LM head is unit 0's token embedding
	eps     float32   // a Llama's RMSNorm ε
	cp      int       // the context-parallel degree (0: none)
	moe     moeLayer  // an MoE model's MoE layers (E = 0: none)
	ep, epr int       // the expert-parallel degree and this rank's index in its group
}

func newDims(c Config, p Part) dims {
	t := p.Degree()
	HS := c.HeadSize()
	d := dims{t: t, r: p.Rank, sp: p.SP, C: c.Hidden, HS: HS, NH: c.Heads / t, KV: c.KV() / t,
		F: c.FFNWidth() / t, Vl: p.VocabRows(c), llama: c.IsLlama(), tied: c.Tied(), eps: float32(c.Eps())}
	d.Cl, d.KVl = d.NH*HS, d.KV*HS
	if c.Experts > 0 {
		d.moe = newMoE(c, p)
	}
	d.ep, d.epr = p.EPDegree(), p.EPRank
	d.vlo = p.Rank * d.Vl
	d.vn = max(0, min(d.Vl, c.Vocab-d.vlo))
	return d
}

// qkvW is the width of the rank's qkv rows, C' + 2·KV'.
func (d dims) qkvW() int { return d.Cl + 2*d.KVl }

// arch is the declarations' view of a pass of b sequences of T tokens.
func (d dims) arch(b, T int) arch.Dims {
	return arch.Dims{B: b, T: T, Part: Part{TP: d.t, Rank: d.r, SP: d.sp, EP: d.ep, EPRank: d.epr}, Flash: d.flash, Recompute: d.rc, CP: d.cp}
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

// wsSizes are the scratch's slices in elements (arch.Workspace as ints).
type wsSizes struct {
	dres, dln, big, scratch, branch int
	gath, dlnl, lnGrad, ce          int
	vec, rope, ring                 int
	x, dy, ringH                    int // 16-bit
	moe, moeDy, route               int // an MoE layer's: fp32, 16-bit, int32
}

func (s wsSizes) f32() int {
	return s.dres + s.dln + s.big + s.scratch + s.branch + s.gath + s.dlnl + s.lnGrad + s.ce + s.vec + s.rope + s.ring + s.moe
}

// workspace sizes the scratch of passes of micro-batches of B sequences
// of the rank's T tokens (arch.Config.Workspace: the declarations of what
// each slice holds, the planner's formula too).
func workspace(c Config, d dims, B, T, attnWorkers int) wsSizes {
	w := c.Workspace(d.arch(B, T), d.half, float64(attnWorkers))
	return wsSizes{dres: int(w.Dres), dln: int(w.Dln), big: int(w.Big), scratch: int(w.Scratch), branch: int(w.Branch),
		gath: int(w.Gath), dlnl: int(w.Dlnl), lnGrad: int(w.LnGrad), ce: int(w.CE), vec: int(w.Vec), rope: int(w.Rope),
		ring: int(w.Ring), x: int(w.X), dy: int(w.Dy), ringH: int(w.RingH),
		moe: int(w.Moe), moeDy: int(w.MoeDy), route: int(w.Route)}
}

// attnWorkers is the materialising attention's worker count on k for B
// sequences of the rank's heads (ops.AttentionScratchSize's).
func attnWorkers(k ops.Backend, B, NH int) int { return max(1, min(k.Threads(), B*NH)) }

// WorkspaceBytes is what New charges to the workspace tag for
// micro-batches of B on one device (t = 1) with flash on or off, fp32 or
// 16-bit, when attention runs on attnWorkers goroutines: arch's Workspace
// in float64, for any configuration, valid or not.
func WorkspaceBytes(c Config, B, attnWorkers int, flash, half bool) float64 {
	return c.Workspace(arch.Dims{B: B, T: c.SeqLen, Flash: flash}, half, float64(max(1, attnWorkers))).Bytes()
}

// RunnerBytes is what New and one NewStash charge to a device for
// micro-batch B on one device in fp32 without flash or recomputation:
// the scratch (WorkspaceBytes) and the whole model's stash (arch's
// declarations) with its two (B,T) int32 token arrays, in float64 for any
// configuration.
func RunnerBytes(c Config, B, attnWorkers int) float64 {
	d := arch.Dims{B: B, T: c.SeqLen}
	return WorkspaceBytes(c, B, attnWorkers, false, false) + c.StageStashAt(d, 0, c.Layers, true, false).Bytes() + d.TokenBytes()
}
