package model

import (
	"fmt"

	"trellis/tensor"
)

// Activations and weights in the policy's dtypes. A saved activation of
// arch's Operand class is a tensor.Buf in the stash: fp32, or the Stash
// dtype (16-bit) under bf16 and fp16. A layer that produces one computes
// in fp32 (out), then keeps it (keep: rounded into the stash); GEMMs read
// the stash's tensor itself as their operand, element-wise kernels its
// fp32 values (vals). A weight is a tensor.Buf in the Param dtype; the
// GEMMs read it as it is and the vectors (norm gains and biases, linear
// biases) are widened into fp32 (vecs) — their values are the roundings
// r(w), so a 16-bit run computes every weight's rounding, as Megatron's
// mixed precision does.

// out is where a layer writes the fp32 values of the first n elements of
// the saved activation save (a pass's share of it): the stash's tensor
// itself in fp32, else scratch.
func (m *GPT) out(save tensor.Buf, scratch []float32, n int) []float32 {
	if save.DType() == tensor.F32 {
		return save.F32()[:n:n]
	}
	return scratch[:n:n]
}

// keep stores v (out's) into the saved activation: nothing to do in fp32;
// rounded into the 16-bit stash, and with round v is set to what the
// stash holds, so that the forward goes on from the rounded values (the
// backward, which widens the same bits, then differentiates exactly the
// function the forward computed, and recomputation reproduces it).
func (m *GPT) keep(save tensor.Buf, v []float32, round bool) {
	if save.DType() == tensor.F32 {
		return
	}
	h := save.Head(len(v))
	m.k.Encode(h, v)
	if round {
		m.k.Decode(v, h)
	}
}

// vals is the fp32 values of a saved activation's first n elements: the
// stash's tensor, or its exact widening into scratch.
func (m *GPT) vals(save tensor.Buf, scratch []float32, n int) []float32 {
	if save.DType() == tensor.F32 {
		return save.F32()[:n:n]
	}
	v := scratch[:n:n]
	m.k.Decode(v, save.Head(n))
	return v
}

// tensorsOf cuts a unit's weights into one Buf per tensor, in Layout order.
func tensorsOf(u Unit, w tensor.Buf) []tensor.Buf {
	out := make([]tensor.Buf, len(u.Tensors))
	for i, t := range u.Tensors {
		o := t.Offset - u.Offset
		out[i] = w.Slice(o, o+t.Size)
	}
	return out
}

// vecs widens weight vectors one after another into the unit's vector
// scratch (a Param-dtype vector is widened; an fp32 one is used as it is).
type vecs struct {
	m    *GPT
	free []float32
}

func (m *GPT) vecs() *vecs { return &vecs{m: m, free: m.w.vec} }

// of is w's fp32 values.
func (v *vecs) of(w tensor.Buf) []float32 {
	if w.DType() == tensor.F32 {
		return w.F32()
	}
	n := w.Len()
	dst := v.free[:n:n]
	v.free = v.free[n:]
	v.m.k.Decode(dst, w)
	return dst
}

// weights fetches unit u's weights, checking that they are the unit's in
// the policy's Param dtype.
func (m *GPT) weights(p Params, u int) (tensor.Buf, error) {
	w, err := p.Weights(u)
	if err != nil {
		return w, fmt.Errorf("model: weights of unit %d: %w", u, err)
	}
	un := m.layout.Units[u]
	if w.Len() != un.Size || w.DType() != m.pol.Param {
		p.ReleaseWeights(u)
		return tensor.Buf{}, fmt.Errorf("model: unit %d has %d %s weights, want %d %s (the precision policy's param dtype)",
			u, w.Len(), w.DType(), un.Size, m.pol.Param)
	}
	return w, nil
}

// grads fetches unit u's gradient buffer, wrapping the error.
func grads(p Params, u int) ([]float32, error) {
	g, err := p.Grads(u)
	if err != nil {
		return nil, fmt.Errorf("model: gradients of unit %d: %w", u, err)
	}
	return g, nil
}

func gradsDone(p Params, u int) error {
	if err := p.GradsDone(u); err != nil {
		return fmt.Errorf("model: gradients of unit %d done: %w", u, err)
	}
	return nil
}

// gradsOf cuts a unit's gradient buffer into one slice per tensor.
func gradsOf(u Unit, g []float32) [][]float32 {
	out := make([][]float32, len(u.Tensors))
	for i, t := range u.Tensors {
		o := t.Offset - u.Offset
		out[i] = g[o : o+t.Size : o+t.Size]
	}
	return out
}
