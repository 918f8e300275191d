package model

import "trellis/ops"

// attnForward runs the attention core of one layer for the rank's NH
// heads of width C (NH' and C' under tensor parallelism): atty =
// softmax(QKᵀ/√d)·V from qkv (B,T,3C), keeping in att what the backward
// needs — the probabilities, or with flash the per-row log-sum-exps.
func (m *GPT) attnForward(a *layerActs, B, T, C, NH int) {
	m.attnCore(a.atty, a.att, a.qkv, B, T, C, NH)
}

// attnCore is attnForward on explicit buffers.
func (m *GPT) attnCore(atty, att, qkv []float32, B, T, C, NH int) {
	if m.flash {
		ops.FlashAttentionForward(m.k, atty, att, qkv, B, T, C, NH)
		return
	}
	ops.AttentionForward(m.k, atty, att, qkv, B, T, C, NH)
}

// attnBackward SETS dqkv (B,T,3C) to the gradient of the attention core
// given datty; flash recomputes the probabilities block by block from the
// stored output and log-sum-exps.
func (m *GPT) attnBackward(dqkv, datty []float32, a *layerActs, B, T, C, NH int) {
	m.attnCoreBackward(dqkv, datty, a.qkv, a.atty, a.att, B, T, C, NH)
}

// attnCoreBackward is attnBackward on explicit buffers (atty is read by
// flash only).
func (m *GPT) attnCoreBackward(dqkv, datty, qkv, atty, att []float32, B, T, C, NH int) {
	if m.flash {
		clear(dqkv)
		ops.FlashAttentionBackward(m.k, dqkv, datty, qkv, atty, att, B, T, C, NH)
		return
	}
	ops.AttentionBackwardSet(m.k, dqkv, m.scratch, datty, qkv, att, B, T, C, NH)
}
