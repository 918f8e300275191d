package model

import (
	"trellis/ops"
	"trellis/tensor"
)

// head is the final norm and the LM head — GPT-2's tied to the token
// embedding, a Llama's its own lm_head (or tied), with an RMSNorm —
// vocab-parallel (Megatron): rank r computes the logits of its V'
// vocabulary columns, z_r = f(LN_f(h))·wte_rᵀ, and the cross-entropy is
// reduced over the group without gathering the (B,T,V) logits:
//
//	M_n = max_ranks max_{v held} z[n,v]                 MaxOverTP
//	S_n = Σ_ranks Σ_{v held} exp(z[n,v] − M_n)           ReduceFromTP
//	Z_n = Σ_ranks z[n,y_n]·[y_n held]                    (the same call)
//	loss_n = log S_n + M_n − Z_n;  p[n,v] = exp(z[n,v] − M_n)/S_n
//
// (ops.Vocab*); at t = 1 it is the softmax cross-entropy kernel. It saves
// the norm's output and statistics, the probabilities (which overwrite
// the logits) and the per-token losses.
type head struct {
	norm norm
	lm   linear // column-parallel over the (tied or own) head weights, no bias
}

// headActs are the head's saved activations.
type headActs struct {
	lnf           normActs
	probs, losses []float32
}

func newHead(d dims) head {
	return head{norm: norm{rms: d.llama, eps: d.eps}, lm: linear{in: d.C, out: d.Vl, hp: true}}
}

// norm is the final norm of the last residual stream h (the rank's
// tokens) into the saved lnf; it returns the LM head's operand.
func (l head) normForward(m *GPT, s *Stash, h, gain, bias []float32) tensor.Buf {
	return l.norm.forward(m, s.head.lnf, h, gain, bias, m.d.tokens(s.b*s.t))
}

// forward is the mean loss over the pass's B·T tokens from the final
// norm's output z and wte (the rank's V' rows).
func (l head) forward(m *GPT, s *Stash, z, wte tensor.Buf) (float32, error) {
	bt := s.b * s.t
	a := s.head
	logits := a.probs[:bt*m.d.Vl]
	if m.d.t == 1 {
		l.lm.gemm(m, logits, nil, z, wte, nil, bt)
		return m.k.CrossEntropyForward(logits, a.losses[:bt], logits, s.targets[:bt], bt, m.d.Vl), nil
	}
	if err := l.lm.forward(m, logits, z, wte, nil, bt); err != nil {
		return 0, err
	}
	return m.vocabLoss(s, logits, bt)
}

// vocabLoss is the vocab-parallel cross-entropy of the rank's logits
// (B·T, V'), which the probabilities overwrite. Every rank returns the
// same mean loss.
func (m *GPT) vocabLoss(s *Stash, logits []float32, bt int) (float32, error) {
	d := m.d
	mx, st := m.w.ce[:bt], m.w.ce[bt:3*bt]
	sum, tgt := st[:bt], st[bt:]
	m.k.VocabRowMax(mx, logits, bt, d.Vl, d.vn)
	if err := m.tp.MaxOverTP(mx); err != nil {
		return 0, err
	}
	m.k.VocabExpSum(sum, tgt, logits, mx, s.targets[:bt], d.vlo, bt, d.Vl, d.vn)
	if err := m.tp.ReduceFromTP(st); err != nil {
		return 0, err
	}
	return float32(m.k.VocabNormalize(s.head.losses[:bt], logits, sum, tgt, bt, d.Vl, d.vn)), nil
}

// backward backpropagates the loss dloss·mean(CE) into the rank's wte rows
// (ACCUMULATED into dwte) and, through f, down to the final norm's input:
// DResidual is SET to the gradient with respect to h.
func (l head) backward(m *GPT, s *Stash, dwte []float32, wte tensor.Buf, dloss float32) ([]float32, error) {
	d := m.d
	bt := s.b * s.t
	a := s.head
	dlogits := m.w.big[:bt*d.Vl]
	if d.t == 1 {
		clear(dlogits)
		m.k.CrossEntropyBackward(dlogits, a.probs, s.targets, dloss, bt, d.Vl)
	} else {
		m.k.VocabLossBackward(dlogits, a.probs, s.targets, d.vlo, bt, d.Vl, d.vn, dloss/float32(bt))
	}
	return l.lm.backwardCol(m, dlogits, a.lnf.out, wte, linGrads{w: dwte}, bt)
}

// normBackward is the final norm's backward: DResidual = d(LN_f)ᵀ·dz.
func (l head) normBackward(m *GPT, s *Stash, h, dz, dgain, dbias, gain []float32) error {
	n := m.d.tokens(s.b * s.t)
	dres := m.w.dres[:n*m.d.C]
	clear(dres)
	return l.norm.backward(m, dres, dgain, dbias, dz, h, gain, s.head.lnf, n)
}

// lastLogits is the next-token logits after the pass's n-th token (a
// pass of one sequence of s.t tokens, n ≤ s.t), gathered over the group.
func (l head) lastLogits(m *GPT, s *Stash, z, wte tensor.Buf, n int, dst []float32) error {
	d := m.d
	C := d.C
	if d.t == 1 {
		m.k.Gemm(ops.GEMM{Layout: ops.NT, M: 1, N: d.Vl, K: C, A: z.Slice((n-1)*C, n*C), LDA: C, B: wte.Head(d.Vl * C), LDB: C,
			C: dst[:d.Vl], LDC: d.Vl})
		return nil
	}
	x, err := m.enter(z, s.t)
	if err != nil {
		return err
	}
	local, all := m.w.big[:d.Vl], m.w.big[d.Vl:d.Vl+d.t*d.Vl]
	m.k.Gemm(ops.GEMM{Layout: ops.NT, M: 1, N: d.Vl, K: C, A: x.Slice((n-1)*C, n*C), LDA: C, B: wte.Head(d.Vl * C), LDB: C,
		C: local, LDC: d.Vl})
	if err := m.tp.GatherSeq(all, local); err != nil {
		return err
	}
	copy(dst, all[:m.cfg.Vocab])
	return nil
}
