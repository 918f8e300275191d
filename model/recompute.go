package model

import "fmt"

// Recompute says which activations a stash drops and the backward
// recomputes (activation recomputation, a.k.a. checkpointing):
//
//   - RecomputeNone keeps every layer's activations.
//   - RecomputeSelective (Korthikanti et al. 2022) keeps everything but
//     the attention core's (B,NH',T,T) probabilities: every layer writes
//     them into one shared buffer, and the backward of layer l reruns
//     the attention core from the stored qkv before its gradient. With
//     flash the stash never holds the probabilities (only the (B,NH',T)
//     log-sum-exps, and the flash backward recomputes the probabilities
//     block by block), so selective is flash's own behaviour and changes
//     nothing.
//   - RecomputeFull keeps only each layer's input (the residual stream,
//     which the stash holds anyway) and ONE layer's activations, which
//     every layer's forward overwrites; the backward of layer l reruns
//     layer l's forward from Residual(l) into them first.
//
// The kernels are deterministic and dropout masks are keyed by position,
// so recomputed activations equal the originals bit for bit, and so do
// losses and gradients. The recomputation runs inside the backward's own
// Weights(u) … ReleaseWeights(u) hold (and, for the deferred weight pass
// of a split backward, inside one of its own), so Params sees the same
// unit sequence as without recomputation: ZeRO-3 gathers nothing more.
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

// shareAtt says whether the layers of a stash share one attention-core
// buffer (selective recomputation of materialised probabilities).
func (d dims) shareAtt() bool { return d.rc == RecomputeSelective && !d.flash }

// layerFloats is one layer's fp32 activations with n LayerNorm-region
// tokens of a (B,T) pass: 3nC + 4n + 4·BT·C' + 2·BT·F + A, or with a
// 16-bit stash nC + 4n + A (res2, the statistics, the attention core's;
// the rest is layerHalves).
func (d dims) layerFloats(B, T int) int {
	BT := B * T
	n := d.tokens(BT)
	if d.half {
		return n*d.C + 4*n + d.attFloats(B, T)
	}
	return 3*n*d.C + 4*n + 4*BT*d.Cl + 2*BT*d.F + d.attFloats(B, T)
}

// layersFloats is what a stash holds for k layers' activations (their
// residual inputs not included):
//
//	none       k·(layer)
//	selective  k·(layer − A) + A      (A the (B,NH',T,T) probabilities; = none with flash)
//	full       layer                  (one layer's, shared)
func (d dims) layersFloats(B, T, k int) int {
	if k == 0 {
		return 0
	}
	switch {
	case d.rc == RecomputeFull:
		return d.layerFloats(B, T)
	case d.shareAtt():
		A := d.attFloats(B, T)
		return k*(d.layerFloats(B, T)-A) + A
	}
	return k * d.layerFloats(B, T)
}

// carveLayers points s.layers[lo:hi] at activation buffers taken from
// cv, shared as layersFloats and layersHalves count them.
func (m *GPT) carveLayers(s *Stash, lo, hi int, cv *carver) {
	d := m.d
	var att []float32
	if d.shareAtt() && hi > lo {
		att = cv.f32(d.attFloats(m.B, m.cfg.SeqLen))
	}
	for l := lo; l < hi; l++ {
		if d.rc == RecomputeFull && l > lo {
			s.layers[l] = s.layers[lo]
			continue
		}
		m.carveLayer(&s.layers[l], att, cv)
	}
}

// recompute restores, before block l's backward, what the stash dropped:
// with full recomputation the whole block's forward from Residual(l)
// (writing Residual(l+1) again, with the same bits), with selective the
// attention core from the stored qkv. w are the block's weights, held by
// the caller.
func (m *GPT) recompute(w []float32, s *Stash, l int) error {
	switch {
	case m.d.rc == RecomputeFull:
		return m.blockForward(w, s, l)
	case m.d.shareAtt() && !m.d.half: // a 16-bit stash's backward reruns it (blockBackwardHalf)
		m.attnForward(&s.layers[l], s.b, s.t, m.d.Cl, m.d.NH)
	}
	return nil
}

// recomputeForWeights is, for the deferred weight pass of a split
// backward (BlockBackwardWeight), full recomputation's rerun of block l's
// forward under its own hold of the block's weights: the passes of other
// blocks between the two halves overwrote the shared activations. The
// weight pass needs no attention probabilities, so selective does nothing.
func (m *GPT) recomputeForWeights(p Params, s *Stash, l int) error {
	if m.d.rc != RecomputeFull {
		return nil
	}
	w, err := m.weights(p, l+1, false)
	if err != nil {
		return err
	}
	defer m.release(p, l+1)
	return m.blockForward(w, s, l)
}

// StashFloatCountFor is stashFloats, in float64 (see StashFloatCount),
// for micro-batch B on one device with flash attention on or off and
// recomputation rc:
//
//	(L+1)·BTC + layers + BTC + 2·BT + BTV + BT
//
// with layers = layersFloats: per layer 15·BTC + 4·BT + A, A = B·NH·T²
// (B·NH·T with flash), all L for none, one A shared for selective
// without flash, one layer for full.
func (c Config) StashFloatCountFor(B int, flash bool, rc Recompute) float64 {
	b, T, C, L := float64(B), float64(c.SeqLen), float64(c.Hidden), float64(c.Layers)
	BT, BTC := b*T, b*T*C
	A := b * float64(c.Heads) * T * T
	if flash {
		A = b * float64(c.Heads) * T
	}
	layer := 15*BTC + 4*BT + A
	layers := L * layer
	switch {
	case L == 0:
	case rc == RecomputeFull:
		layers = layer
	case rc == RecomputeSelective && !flash:
		layers = L*(layer-A) + A
	}
	return (L+1)*BTC + layers + BTC + 2*BT + BT*float64(c.Vocab) + BT
}
