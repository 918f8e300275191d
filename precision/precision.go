// Package precision is the engine's one mixed-precision policy, as
// torchtitan's MixedPrecisionPolicy and Megatron's mixed precision
// describe it: which dtype each kind of value has. It is handed to the
// layers (which compute in Compute and save their operand activations in
// Stash) and to the state strategies (which keep Master weights for the
// optimizer and hand the layers weights already in Param), so no other
// component re-derives a precision from a plan.
//
//	             fp32   bf16   fp16
//	Param        fp32   bf16   fp16    the weights a layer reads (the compute copy)
//	Compute      fp32   bf16   fp16    GEMM operands; accumulation is always fp32
//	Stash        fp32   bf16   fp16    saved GEMM operands and element-wise inputs
//	Grad         fp32   fp32   fp32    gradient accumulation
//	Reduce       fp32   fp32   fp32    gradient reductions between ranks
//	Master       fp32   fp32   fp32    the optimizer's weights and moments
//	LossScale    -      -      dynamic (Micikevicius et al. 2018)
//
// Everything else — norms and their statistics, softmax, the loss, the
// residual stream — stays fp32 under every policy.
package precision

import (
	"fmt"

	"trellis/tensor"
)

// Policy is the dtype of each kind of value (see the package doc).
type Policy struct {
	Param, Compute, Stash tensor.DType
	Grad, Reduce, Master  tensor.DType
	LossScale             Scaling
}

// Scaling is dynamic loss scaling: the loss is multiplied by a scale S
// before the backward pass, S is halved after a step whose gradients
// overflow (the step is skipped) and doubled after Window clean steps.
type Scaling struct {
	Dynamic bool
	Initial float64 // the first S
	Window  int
}

// FP32 computes everything in fp32.
func FP32() Policy { return of(tensor.F32) }

// BF16 is Megatron's bf16 mixed precision: bf16 weights, GEMM operands and
// saved operands, fp32 everything else.
func BF16() Policy { return of(tensor.BF16) }

// FP16 is BF16 with fp16 and dynamic loss scaling from scale initial,
// doubled after window clean steps.
func FP16(initial float64, window int) Policy {
	p := of(tensor.F16)
	p.LossScale = Scaling{Dynamic: true, Initial: initial, Window: window}
	return p
}

func of(dt tensor.DType) Policy {
	return Policy{Param: dt, Compute: dt, Stash: dt, Grad: tensor.F32, Reduce: tensor.F32, Master: tensor.F32}
}

// Half says whether the layers compute in a 16-bit dtype.
func (p Policy) Half() bool { return p.Compute != tensor.F32 }

// Mixed says whether the weights the layers read differ in dtype from the
// optimizer's master weights, so that a strategy keeps both.
func (p Policy) Mixed() bool { return p.Param != p.Master }

// Validate says what the engine cannot run: fp32 gradients, reductions and
// master weights, and one compute dtype for the weights, GEMMs and stash.
func (p Policy) Validate() error {
	switch {
	case p.Grad != tensor.F32 || p.Reduce != tensor.F32 || p.Master != tensor.F32:
		return fmt.Errorf("precision: grad=%s reduce=%s master=%s: the engine keeps gradients, reductions and master weights in fp32", p.Grad, p.Reduce, p.Master)
	case p.Param != p.Compute || p.Stash != p.Compute:
		return fmt.Errorf("precision: param=%s compute=%s stash=%s: the engine computes on its weights' dtype and saves operands in it", p.Param, p.Compute, p.Stash)
	case p.LossScale.Dynamic && !(p.LossScale.Initial >= 1 && p.LossScale.Window >= 1):
		return fmt.Errorf("precision: loss scale %g with window %d: want a scale >= 1 and a window >= 1", p.LossScale.Initial, p.LossScale.Window)
	}
	return nil
}

// String names the compute dtype ("fp32", "bf16", "fp16").
func (p Policy) String() string { return p.Compute.String() }
