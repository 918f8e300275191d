package arch

import "fmt"

// Class says how a saved activation is stored.
type Class uint8

const (
	// Exact activations stay fp32 under every precision: the residual
	// stream (Megatron's fp32_residual_connection), norm statistics,
	// attention probabilities or log-sum-exps, the loss's probabilities.
	Exact Class = iota
	// Operand activations are GEMM operands or element-wise inputs, kept
	// in the precision's compute dtype (2 bytes under bf16 and fp16).
	Operand
)

// Role says what activation recomputation does with a saved tensor.
type Role uint8

const (
	// Kept: one per layer, unless full recomputation shares one layer's
	// activations between all layers of a stash.
	Kept Role = iota
	// Probs: the attention core's (B,NH',T,T) probabilities, which
	// selective recomputation shares between the layers of a stash (each
	// layer's backward reruns the core first).
	Probs
)

// Recompute says which activations a stash drops and the backward
// recomputes (activation recomputation, a.k.a. checkpointing):
//
//   - RecomputeNone keeps every layer's activations.
//   - RecomputeSelective (Korthikanti et al. 2022) keeps everything but
//     the attention core's (B,NH',T,T) probabilities (Role Probs): every
//     layer writes them into one shared buffer, and the backward of layer
//     l reruns the attention core from the stored qkv before its
//     gradient. With flash the stash never holds the probabilities (only
//     the (B,NH',T) log-sum-exps, and the flash backward recomputes the
//     probabilities block by block), so selective is flash's own
//     behaviour and changes nothing.
//   - RecomputeFull keeps only each layer's input (the residual stream,
//     which the stash holds anyway) and ONE layer's activations, which
//     every layer's forward overwrites; the backward of layer l reruns
//     layer l's forward from its input into them first.
type Recompute int

const (
	RecomputeNone Recompute = iota
	RecomputeSelective
	RecomputeFull
)

func (r Recompute) String() string {
	switch r {
	case RecomputeNone:
		return "none"
	case RecomputeSelective:
		return "selective"
	case RecomputeFull:
		return "full"
	}
	return fmt.Sprintf("Recompute(%d)", int(r))
}

// Saved is one activation a layer keeps for its backward pass. Its
// element count is a float64 so that a configuration too large for any
// machine is still counted (and refused) rather than overflowed; below
// 2^53 it is exact.
type Saved struct {
	Name  string
	Class Class
	Role  Role
	Elems float64
}

// Dims are what a rank's saved activations depend on: the pass's
// micro-batch of B sequences of T tokens, the rank's part of every layer,
// the attention kernel and the recomputation mode. Under context
// parallelism (CP > 1) T is the rank's share of every sequence, seq_len/cp
// tokens, and attention is the ring's (flash: log-sum-exps kept).
type Dims struct {
	B, T      int
	Part      Part
	Flash     bool
	Recompute Recompute
	CP        int // the context-parallel degree (0 or 1: none)
}

// Tokens is n, the tokens of a pass the rank's norm, dropout and residual
// regions hold: B·T, or B·T/t with sequence parallelism.
func (d Dims) Tokens() int {
	if d.Part.SP {
		return d.B * d.T / d.Part.Degree()
	}
	return d.B * d.T
}

// SharesProbs says whether the layers of a stash share one attention-core
// buffer (selective recomputation of materialised probabilities).
func (d Dims) SharesProbs() bool { return d.Recompute == RecomputeSelective && !d.Flash }

// localF are a rank's widths: C' = C/t attention columns, F = 4C/t MLP
// columns, NH' = NH/t heads, V' = ⌈V/t⌉ vocabulary rows.
func (c Config) localF(p Part) (Cl, F, NH, V float64) {
	t := p.Degree()
	return float64(c.Hidden / t), float64(4 * c.Hidden / t), float64(c.Heads / t), float64(p.VocabRows(c))
}

// tokensF is Tokens in float64.
func (d Dims) tokensF() float64 {
	n := float64(d.B) * float64(d.T)
	if d.Part.SP {
		n /= float64(d.Part.Degree())
	}
	return n
}

// BlockSaved declares what one GPT-2 block keeps for its backward pass,
// in the order the stash carves it (n = Tokens, C' F NH' as in local):
//
//	ln_1     out (n,C) operand, mean (n), rstd (n)
//	c_attn   qkv (B,T,3C') operand, the attention core's input
//	attn     probabilities (B,NH',T,T), or with flash log-sum-exps (B,NH',T)
//	         kept per layer; out (B,T,C') operand, c_proj's input
//	residual res2 (n,C), the stream between the branches
//	ln_2     out (n,C) operand, mean (n), rstd (n)
//	c_fc     fc (B,T,F) operand, GELU's input; fcg = GELU(fc) (B,T,F) operand
//
// The block's input residual is the stash's (Residuals); dropout masks are
// recomputed from their keys, never stored.
//
// A Llama block's are llamaBlockSaved's.
func (c Config) BlockSaved(d Dims) []Saved {
	if c.IsLlama() {
		return c.llamaBlockSaved(d)
	}
	Cl, F, NH, _ := c.localF(d.Part)
	n, BT, C, B, T := d.tokensF(), float64(d.B)*float64(d.T), float64(c.Hidden), float64(d.B), float64(d.T)
	att := Saved{Name: "attn.probs", Class: Exact, Role: Probs, Elems: B * NH * T * T}
	if d.Flash {
		att = Saved{Name: "attn.lse", Class: Exact, Elems: B * NH * T}
	}
	return []Saved{
		{Name: "ln_1.out", Class: Operand, Elems: n * C},
		{Name: "ln_1.mean", Class: Exact, Elems: n},
		{Name: "ln_1.rstd", Class: Exact, Elems: n},
		{Name: "attn.qkv", Class: Operand, Elems: 3 * BT * Cl},
		att,
		{Name: "attn.out", Class: Operand, Elems: BT * Cl},
		{Name: "res2", Class: Exact, Elems: n * C},
		{Name: "ln_2.out", Class: Operand, Elems: n * C},
		{Name: "ln_2.mean", Class: Exact, Elems: n},
		{Name: "ln_2.rstd", Class: Exact, Elems: n},
		{Name: "mlp.fc", Class: Operand, Elems: BT * F},
		{Name: "mlp.fcg", Class: Operand, Elems: BT * F},
	}
}

// BlockSavedAt is what block l keeps: BlockSaved, or an MoE layer's
// (llamaMoESaved).
func (c Config) BlockSavedAt(d Dims, l int) []Saved {
	if c.MoELayer(l) {
		return c.llamaMoESaved(d)
	}
	return c.BlockSaved(d)
}

// HeadSaved declares what the head keeps between its forward and its
// backward: the final norm's output (operand) and statistics, the softmax
// of the rank's V' logit columns and the per-token losses (a Llama's:
// llamaHeadSaved).
func (c Config) HeadSaved(d Dims) []Saved {
	if c.IsLlama() {
		return c.llamaHeadSaved(d)
	}
	_, _, _, V := c.localF(d.Part)
	n, BT, C := d.tokensF(), float64(d.B)*float64(d.T), float64(c.Hidden)
	return []Saved{
		{Name: "ln_f.out", Class: Operand, Elems: n * C},
		{Name: "ln_f.mean", Class: Exact, Elems: n},
		{Name: "ln_f.rstd", Class: Exact, Elems: n},
		{Name: "probs", Class: Exact, Elems: BT * V},
		{Name: "losses", Class: Exact, Elems: BT},
	}
}

// DeferredSaved declares what a zero-bubble split backward keeps from a
// block's input-gradient pass B for its weight-gradient pass W (Qi et al.
// 2023): the output gradients dY of the four linears, fp32, each (B,T,·)
// of the layer's local output width (the row-parallel ones' full C); a
// Llama's: llamaDeferredSaved.
func (c Config) DeferredSaved(d Dims) []Saved {
	if c.IsLlama() {
		return c.llamaDeferredSaved(d)
	}
	Cl, F, _, _ := c.localF(d.Part)
	BT, C := float64(d.B)*float64(d.T), float64(c.Hidden)
	return []Saved{
		{Name: "mlp.c_proj.dy", Class: Exact, Elems: BT * C},
		{Name: "mlp.c_fc.dy", Class: Exact, Elems: BT * F},
		{Name: "attn.c_proj.dy", Class: Exact, Elems: BT * C},
		{Name: "attn.c_attn.dy", Class: Exact, Elems: 3 * BT * Cl},
	}
}

// Elems are a stash's element counts: F32 fp32 values and Half 16-bit ones.
type Elems struct{ F32, Half float64 }

// Bytes is 4·F32 + 2·Half.
func (e Elems) Bytes() float64 { return 4*e.F32 + 2*e.Half }

// Ints are the counts as ints; ok is false when one does not fit (a
// configuration no machine holds).
func (e Elems) Ints() (f32, half int, ok bool) {
	const lim = 1 << 53
	if !(e.F32 < lim && e.Half < lim) {
		return 0, 0, false
	}
	return int(e.F32), int(e.Half), true
}

// add counts s times times, its operands in 16-bit when half.
func (e *Elems) add(s []Saved, half bool, times float64) {
	for _, x := range s {
		if x.Class == Operand && half {
			e.Half += times * x.Elems
		} else {
			e.F32 += times * x.Elems
		}
	}
}

// Sum is the element count of the saved tensors s (operands 16-bit when half).
func Sum(s []Saved, half bool) Elems {
	var e Elems
	e.add(s, half, 1)
	return e
}

// BlocksElems is what a stash keeps for k blocks' activations (their
// input residuals not included):
//
//	none       k·(block)
//	selective  k·(block − probs) + probs     (= none with flash)
//	full       block                         (one block's, shared)
func (c Config) BlocksElems(d Dims, k int, half bool) Elems {
	kf := float64(k)
	var e Elems
	if k == 0 {
		return e
	}
	saved := c.BlockSaved(d)
	switch {
	case d.Recompute == RecomputeFull:
		e.add(saved, half, 1)
	case d.SharesProbs():
		for _, s := range saved {
			times := kf
			if s.Role == Probs {
				times = 1
			}
			e.add([]Saved{s}, half, times)
		}
	default:
		e.add(saved, half, kf)
	}
	return e
}

// BlocksElemsAt is what a stash keeps for blocks [lo, hi)' activations,
// each block its own kind (BlockSavedAt: dense or MoE), shared as
// BlocksElems shares them: under full recomputation one block of each kind
// the range holds, under selective one probabilities buffer. For a model
// whose blocks are alike it is BlocksElems(d, hi−lo, half).
func (c Config) BlocksElemsAt(d Dims, lo, hi int, half bool) Elems {
	var e Elems
	if hi <= lo {
		return e
	}
	if d.Recompute == RecomputeFull {
		seen := map[bool]bool{}
		for l := lo; l < hi; l++ {
			if k := c.MoELayer(l); !seen[k] {
				seen[k] = true
				e.add(c.BlockSavedAt(d, l), half, 1)
			}
		}
		return e
	}
	shared := false
	for l := lo; l < hi; l++ {
		for _, s := range c.BlockSavedAt(d, l) {
			if s.Role == Probs && d.SharesProbs() {
				if shared {
					continue
				}
				shared = true
			}
			e.add([]Saved{s}, half, 1)
		}
	}
	return e
}

// StageStashAt is StageStash for the blocks [lo, hi) (BlocksElemsAt).
func (c Config) StageStashAt(d Dims, lo, hi int, head, half bool) Elems {
	e := c.BlocksElemsAt(d, lo, hi, half)
	e.F32 += float64(hi-lo+1) * d.tokensF() * float64(c.Hidden)
	if head {
		h := Sum(c.HeadSaved(d), half)
		e.F32, e.Half = e.F32+h.F32, e.Half+h.Half
	}
	return e
}

// StageStash is the element count of the stash of a pipeline stage
// holding k blocks: its k+1 residual streams (the blocks' inputs and the
// last one's output, (n,C) fp32 each), the blocks' activations and, with
// the head, the head's. The whole model's stash is StageStash(L, true).
// Its (B,T) input and target token ids (int32) are TokenBytes. Its blocks
// are counted alike (BlockSaved); a model with MoE layers needs
// StageStashAt.
func (c Config) StageStash(d Dims, k int, head, half bool) Elems {
	e := c.BlocksElems(d, k, half)
	e.F32 += float64(k+1) * d.tokensF() * float64(c.Hidden)
	if head {
		h := Sum(c.HeadSaved(d), half)
		e.F32, e.Half = e.F32+h.F32, e.Half+h.Half
	}
	return e
}

// TokenBytes is a stash's input and target token ids: 2·B·T int32.
func (d Dims) TokenBytes() float64 { return 8 * float64(d.B) * float64(d.T) }
