package arch

import (
	"errors"
	"fmt"
)

// Part is the piece of every layer one rank computes under Megatron
// tensor parallelism: rank Rank of a tensor-parallel group of TP ranks.
// The zero value (or TP = 1) is the whole model. Each rank holds
//
//	attention      NH/t heads: rows [r·C/t, (r+1)·C/t) of each of q, k, v
//	               in c_attn (column-parallel), the same input columns of
//	               c_proj (row-parallel)
//	MLP            outputs [r·4C/t, (r+1)·4C/t) of c_fc (column-parallel),
//	               the same input columns of c_proj (row-parallel)
//	embedding      rows [r·V', (r+1)·V') of wte, V' = ⌈V/t⌉; rows ≥ V are
//	               padding: zero, never updated, never saved, no probability
//	replicated     wpe, every LayerNorm, the row-parallel biases (added once,
//	               after the reduction)
//
// (a Llama's split is llamaParams': heads with their key/value heads,
// SwiGLU columns, the vocabulary of the embedding and the untied head)
//
// With SP (sequence parallelism, Korthikanti et al. 2022) the LayerNorm,
// dropout and residual regions hold B·T/t of the micro-batch's tokens
// (rank r the flattened tokens [r·BT/t, (r+1)·BT/t)).
type Part struct {
	TP   int  // tensor-parallel degree t (0 or 1: none)
	Rank int  // this rank's index in its tensor-parallel group
	SP   bool // sequence parallelism (needs TP > 1)
	// EP is the expert-parallel degree (0 or 1: none), EPRank this rank's
	// index in its expert-parallel group: it holds experts
	// [EPRank·E/EP, (EPRank+1)·E/EP) of every MoE layer (moe.go).
	EP, EPRank int
}

// EPDegree is the expert-parallel degree (1 for the zero value).
func (p Part) EPDegree() int { return max(1, p.EP) }

// Degree is t (1 for the zero value).
func (p Part) Degree() int { return max(1, p.TP) }

// Split says whether layers are split at all (t > 1).
func (p Part) Split() bool { return p.Degree() > 1 }

// Validate checks the part against c: t divides the heads and the MLP
// width (GPT-2's 4C; a Llama's F, and its key/value heads), the rank is in range, SP has t > 1 and t divides seq_len.
func (p Part) Validate(c Config) error {
	t := p.Degree()
	var errs []error
	switch {
	case p.TP < 0:
		errs = append(errs, fmt.Errorf("tp=%d must be positive", p.TP))
	case p.Rank < 0 || p.Rank >= t:
		errs = append(errs, fmt.Errorf("model: tensor-parallel rank %d is not in [0, tp=%d)", p.Rank, t))
	}
	if c.Heads > 0 && c.Heads%t != 0 {
		errs = append(errs, fmt.Errorf("tp=%d does not divide model.heads=%d", t, c.Heads))
	}
	switch {
	case c.IsLlama():
		if kv := c.KV(); kv > 0 && kv%t != 0 {
			errs = append(errs, fmt.Errorf("tp=%d does not divide model.kv_heads=%d: tensor parallelism splits the key/value heads (each rank keeps whole groups of query heads with the key/value head they share)", t, kv))
		}
		if f := c.FFNWidth(); f > 0 && f%t != 0 {
			errs = append(errs, fmt.Errorf("tp=%d does not divide the SwiGLU width model.ffn_hidden=%d", t, f))
		}
	case c.Hidden > 0 && (4*c.Hidden)%t != 0:
		errs = append(errs, fmt.Errorf("tp=%d does not divide the MLP width 4·model.hidden=%d", t, 4*c.Hidden))
	}
	if ep := p.EPDegree(); ep > 1 || p.EP < 0 {
		errs = append(errs, p.validateEP(c)...)
	}
	if c.Experts > 0 && t > 1 { // moe.go: every expert split as the dense SwiGLU
		if fe := c.ExpertWidth(); fe%t != 0 {
			errs = append(errs, fmt.Errorf("tp=%d does not divide the experts' width model.expert_ffn_hidden=%d (tensor parallelism splits every expert's SwiGLU columns)", t, fe))
		}
	}
	if p.SP && t == 1 {
		errs = append(errs, errors.New("sp=on needs tp > 1 (sequence parallelism splits the tensor-parallel group's tokens)"))
	}
	if p.SP && c.SeqLen > 0 && c.SeqLen%t != 0 {
		errs = append(errs, fmt.Errorf("sp=on: tp=%d does not divide model.seq_len=%d", t, c.SeqLen))
	}
	return errors.Join(errs...)
}

// VocabRows is V' = ⌈V/t⌉, the rows of wte each rank holds (padding included).
func (p Part) VocabRows(c Config) int { t := p.Degree(); return (c.Vocab + t - 1) / t }

// Slice places a local tensor inside its global one: the global tensor,
// viewed with shape View (the same element count as its Shape), and the
// box of extent Ext at offset Off in that view. The local tensor's first
// numel(Ext) elements are the box in row-major order; any further elements
// are padding. An empty View means the whole tensor.
type Slice struct {
	View []int
	Off  []int
	Ext  []int
}

// Whole says whether the slice is the whole tensor.
func (s Slice) Whole() bool { return len(s.View) == 0 }

// Elems is the number of real (not padding) elements of the slice.
func (s Slice) Elems() int {
	n := 1
	for _, e := range s.Ext {
		n *= e
	}
	return n
}

// Runs calls fn for each maximal run of consecutive slice elements that are
// also consecutive in the global tensor, in order: local element index
// (within the box), global element index, length. A whole slice is one run
// of n elements.
func (s Slice) Runs(n int, fn func(local, global, length int)) {
	if s.Whole() {
		fn(0, 0, n)
		return
	}
	d := len(s.View)
	stride := make([]int, d)
	st := 1
	for i := d - 1; i >= 0; i-- {
		stride[i] = st
		st *= s.View[i]
	}
	inner := s.Ext[d-1]
	if inner == 0 {
		return
	}
	idx := make([]int, d) // position within the box, last dim fixed at 0
	for local := 0; local < s.Elems(); local += inner {
		g := 0
		for i := range d {
			g += (s.Off[i] + idx[i]) * stride[i]
		}
		fn(local, g, inner)
		for i := d - 2; i >= 0; i-- {
			if idx[i]++; idx[i] < s.Ext[i] {
				break
			}
			idx[i] = 0
		}
	}
}

// validateEP checks expert parallelism against c: an MoE model whose
// experts ep divides and its rank in range; capacity and dropless routing
// both run (the dispatch buffers are sized by ExpertRows' bound).
func (p Part) validateEP(c Config) []error {
	ep := p.EPDegree()
	switch {
	case p.EP < 0:
		return []error{fmt.Errorf("ep=%d must be positive", p.EP)}
	case c.Experts <= 0:
		return []error{fmt.Errorf("ep=%d without model.experts: expert parallelism splits the experts", ep)}
	case p.EPRank < 0 || p.EPRank >= ep:
		return []error{fmt.Errorf("model: expert-parallel rank %d is not in [0, ep=%d)", p.EPRank, ep)}
	}
	var errs []error
	if c.Experts%ep != 0 {
		errs = append(errs, fmt.Errorf("ep=%d does not divide model.experts=%d", ep, c.Experts))
	}
	return errs
}
