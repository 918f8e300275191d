package model

import (
	"fmt"
	"unsafe"

	"trellis/device"
	"trellis/ops"
	"trellis/tensor"
)

// Mixed precision (Options.Compute = tensor.BF16). The Params still hand
// out fp32 weights: under mixed precision they are the optimizer's fp32
// master weights (charged to optim, see device.Config.MasterWeights). The
// runner keeps a bf16 compute copy of every unit it holds (tag param,
// 2 bytes per parameter), rounded to nearest-even from the fp32 weights each
// time a forward pass fetches a unit, and runs every linear layer's three
// GEMMs and the LM head's two in bf16 with fp32 accumulation:
//
//	y  = bf16(x)·bf16(W)ᵀ + b                     (fp32 out, bias and residual in fp32)
//	dx = bf16(dy)·bf16(W)                          (fp32 out)
//	dW += bf16(dy)ᵀ·bf16(x)                        (fp32, accumulated in fp32)
//
// Everything else stays fp32: the embedding lookup, LayerNorm (its
// statistics too), GELU, softmax and attention, the cross-entropy, the
// gradients and their reduction (Megatron's convention for bf16). The
// stash keeps the GEMMs' activation operands and the attention and GELU
// inputs in bf16 (stash16.go; a tensor-parallel rank its slices,
// tp16.go), so the GEMMs read x from it and only dy is rounded into
// workspace (and, with SP, the gathered x). Options.Compute = tensor.F16 is the
// same with fp16 in place of bf16 (the GEMMs widen fp16 exactly to fp32);
// its loss scaling is the trainer's (train/precision.go). A
// tensor-parallel part runs the same GEMMs on its slices (tp_forward.go,
// tp_backward.go, half_grad.go) and keeps the copy of its own weights; a
// pipeline stage's runner keeps the copy of Options.Units only.

// halfState is the bf16 compute copy and the GEMM operands' scratch. The
// copy is resident (one buffer for every held unit) or, with
// Options.HalfPerUnit (ZeRO-3, whose fp32 weights are gathered per unit),
// allocated when a unit's weights are fetched and freed when they are
// released, so that it is sharded as the weights are.
type halfState struct {
	dev     *device.Device
	lay     Layout
	perUnit bool
	dt      tensor.DType     // bf16 or fp16
	whole   *device.Buffer   // resident: (Layout.Size) 16-bit weights, tag param
	units   []*device.Buffer // per unit: its 16-bit weights while fetched
	refs    []int            // per unit: fetches not yet released
	bits    [][]uint16       // per unit: its 16-bit weights
	base    []uintptr        // per unit: the fp32 slice the copy was last matched with
	ws      *device.Buffer   // 16-bit workspace: x and dy below
	vecBuf  *device.Buffer   // fp32 workspace: vec below
	vec     []float32        // (13C) a block's rounded vectors, or ln_f's (weights16.go)
	x       []uint16         // (B·T·C) SP: a gathered 16-bit LayerNorm output; else empty
	dy      []uint16         // (B·T·max(C, F, V')) a backward GEMM's output gradient
}

// newHalf allocates the bf16 copy of the held units (every unit when
// units is nil; none when per unit), the GEMM operands' scratch of
// scratch = (nx, ndy) elements (dims.halfScratch) and the rounded vectors
// of a block of width hidden. The GEMMs read their activation operands
// from the 16-bit stash, so x is allocated only for SP's gathered ones.
func newHalf(dev *device.Device, dt tensor.DType, lay Layout, scratch [2]int, hidden int, units []int, perUnit bool) (*halfState, error) {
	n := len(lay.Units)
	h := &halfState{dev: dev, dt: dt, lay: lay, perUnit: perUnit, units: make([]*device.Buffer, n), refs: make([]int, n),
		bits: make([][]uint16, n), base: make([]uintptr, n)}
	if !perUnit {
		if units == nil {
			for u := range lay.Units {
				units = append(units, u)
			}
		}
		size := 0
		for _, u := range units {
			size += lay.Units[u].Size
		}
		w, err := dev.AllocOf(device.Param, dt, size)
		if err != nil {
			return nil, fmt.Errorf("model: %s weights: %w", dt, err)
		}
		h.whole = w
		all := w.Bits
		for _, u := range units {
			sz := lay.Units[u].Size
			h.bits[u], all = all[:sz:sz], all[sz:]
		}
	}
	nx, ndy := scratch[0], scratch[1]
	ws, err := dev.AllocOf(device.Workspace, dt, nx+ndy)
	if err != nil {
		h.whole.Free()
		return nil, fmt.Errorf("model: %s GEMM scratch: %w", dt, err)
	}
	s := ws.Bits
	h.ws, h.x, h.dy = ws, s[:nx:nx], s[nx:]
	if h.vecBuf, err = dev.Alloc(device.Workspace, 13*hidden); err != nil {
		h.free()
		return nil, fmt.Errorf("model: %s rounded vectors: %w", dt, err)
	}
	h.vec = h.vecBuf.Data
	return h, nil
}

func (h *halfState) free() {
	if h == nil {
		return
	}
	h.whole.Free()
	for _, b := range h.units {
		b.Free()
	}
	h.ws.Free()
	h.vecBuf.Free()
}

// weights fetches unit u's fp32 weights; under bf16 it also matches the
// bf16 copy with them and rounds them into it when round is set (forward
// passes) or the copy is per unit (it was freed since). A backward pass
// otherwise reuses the forward's rounding: the weights do not change
// between a micro-batch's two passes.
func (m *GPT) weights(p Params, u int, round bool) ([]float32, error) {
	w, err := weights(p, u)
	if err != nil || m.half == nil || len(w) == 0 {
		return w, err
	}
	h, un := m.half, m.layout.Units[u]
	if len(w) != un.Size {
		p.ReleaseWeights(u)
		return nil, fmt.Errorf("model: unit %d has %d weights, want %d", u, len(w), un.Size)
	}
	if !h.perUnit && h.bits[u] == nil {
		p.ReleaseWeights(u)
		return nil, fmt.Errorf("model: unit %d has no %s copy: it is not in Options.Units", u, h.dt)
	}
	if h.perUnit {
		if h.refs[u] == 0 {
			b, err := h.dev.AllocOf(device.Param, h.dt, un.Size)
			if err != nil {
				p.ReleaseWeights(u)
				return nil, fmt.Errorf("model: %s weights of unit %d: %w", h.dt, u, err)
			}
			h.units[u], h.bits[u] = b, b.Bits
		}
		h.refs[u]++
		round = true
	}
	h.base[u] = uintptr(unsafe.Pointer(&w[0]))
	if round {
		m.encode(h.bits[u], w)
	}
	return w, nil
}

// release is p.ReleaseWeights(u) for weights fetched by m.weights: a per
// unit bf16 copy is freed with the last release.
func (m *GPT) release(p Params, u int) {
	p.ReleaseWeights(u)
	h := m.half
	if h == nil || !h.perUnit || h.refs[u] == 0 {
		return
	}
	if h.refs[u]--; h.refs[u] == 0 {
		h.units[u].Free()
		h.units[u], h.bits[u], h.base[u] = nil, nil, 0
	}
}

// halfOf is the bf16 copy of w, a slice of a unit's fp32 weights fetched
// by m.weights.
func (m *GPT) halfOf(w []float32) []uint16 {
	p := uintptr(unsafe.Pointer(&w[0]))
	for u, b := range m.half.base {
		if b != 0 && p >= b && p+uintptr(len(w))*4 <= b+uintptr(len(m.half.bits[u]))*4 {
			off := int(p-b) / 4
			return m.half.bits[u][off : off+len(w)]
		}
	}
	panic("model: halfOf: the weights were not fetched through GPT.weights")
}

// linearForward is ops.LinearResidualForward (res non-nil) or
// ops.LinearForward, an fp32 runner's (a 16-bit runner's passes call
// linearForwardH on its 16-bit stash):
//
//	out = res + inp·wᵀ + bias     out, res (N,OC)   inp (N,C)   w (OC,C)
func (m *GPT) linearForward(out, res, inp, w, bias []float32, N, C, OC int) {
	if res != nil {
		ops.LinearResidualForward(m.k, out, res, inp, w, bias, N, C, OC)
		return
	}
	ops.LinearForward(m.k, out, inp, w, bias, N, C, OC)
}

// linearForwardH is linearForward in the runner's 16-bit type, its input
// x a 16-bit stash's tensor: out = res + x·w̃ᵀ + bias.
func (m *GPT) linearForwardH(out, res []float32, x []uint16, w, bias []float32, N, C, OC int) {
	x = x[:N*C]
	wh := m.halfOf(w[:OC*C])
	if m.half.dt == tensor.F16 {
		m.k.MatMulF16Ep(ops.NT, N, OC, C, tensor.F16View(x), C, tensor.F16View(wh), C, out, OC, res, bias)
		return
	}
	m.k.MatMulBF16Ep(ops.NT, N, OC, C, tensor.BF16View(x), C, tensor.BF16View(wh), C, out, OC, res, bias)
}

// linearBackwardSet is ops.LinearBackwardSet, an fp32 runner's (a 16-bit
// runner's call linearBackwardSetH): dinp = dout·w is SET; dw += doutᵀ·inp
// and dbias += Σ dout ACCUMULATE.
//
//	dinp (N,C)   dw (OC,C)   dbias (OC) or nil   dout (N,OC)   inp (N,C)   w (OC,C)
func (m *GPT) linearBackwardSet(dinp, dw, dbias, dout, inp, w []float32, N, C, OC int) {
	ops.LinearBackwardSet(m.k, dinp, dw, dbias, dout, inp, w, N, C, OC)
}

// linearBackwardSetH is linearBackwardSet in the runner's 16-bit type,
// the layer's input x a 16-bit stash's tensor (dout rounded into dy).
func (m *GPT) linearBackwardSetH(dinp, dw, dbias, dout []float32, x []uint16, w []float32, N, C, OC int) {
	dy := m.half.dy[:N*OC]
	m.encode(dy, dout[:N*OC])
	m.halfGEMMs(dinp, dw, dy, x, w, N, C, OC)
	if dbias != nil {
		ops.BiasBackward(m.k, dbias, dout, N, OC)
	}
}

// halfGEMMs are a linear layer's backward GEMMs from its 16-bit output
// gradient dy (N,OC): dinp = dy·w̃ SET unless dinp is nil, dw += dyᵀ·x
// unless dw is nil (x (N,C) 16-bit, w (OC,C) fetched by m.weights).
func (m *GPT) halfGEMMs(dinp, dw []float32, dy, x []uint16, w []float32, N, C, OC int) {
	f16 := m.half.dt == tensor.F16
	if dinp != nil {
		wh := m.halfOf(w[:OC*C])
		if f16 {
			m.k.MatMulF16(ops.NN, N, C, OC, tensor.F16View(dy), OC, tensor.F16View(wh), C, dinp, C, false)
		} else {
			m.k.MatMulBF16(ops.NN, N, C, OC, tensor.BF16View(dy), OC, tensor.BF16View(wh), C, dinp, C, false)
		}
	}
	if dw != nil {
		x = x[:N*C]
		if f16 {
			m.k.MatMulF16(ops.TN, OC, C, N, tensor.F16View(dy), OC, tensor.F16View(x), C, dw, C, true)
		} else {
			m.k.MatMulBF16(ops.TN, OC, C, N, tensor.BF16View(dy), OC, tensor.BF16View(x), C, dw, C, true)
		}
	}
}

// decode widens src (16-bit, the runner's type) into dst exactly.
func (m *GPT) decode(dst []float32, src []uint16) {
	if m.half.dt == tensor.BF16 {
		ops.DecodeBF16(m.k, dst, tensor.BF16View(src))
		return
	}
	ops.DecodeF16(m.k, dst, tensor.F16View(src))
}

// round rounds x to the runner's 16-bit type into dst and widens it back
// into x, so that x holds exactly the values dst stores.
func (m *GPT) round(dst []uint16, x []float32) {
	m.encode(dst, x)
	m.decode(x, dst[:len(x)])
}

// encode rounds src into dst in the runner's 16-bit type, to nearest even.
func (m *GPT) encode(dst []uint16, src []float32) {
	if m.half.dt == tensor.BF16 {
		ops.EncodeBF16(m.k, tensor.BF16View(dst), src)
		return
	}
	ops.EncodeF16(m.k, tensor.F16View(dst), src)
}
