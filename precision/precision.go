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
// fp8 (FP8) is bf16 whose linear layers' GEMMs consume fp8 operands
// (package fp8: e4m3 forward operands, e5m2 or e4m3 gradients, scaled per
// tensor with an amax history or per DeepSeek-V3's tiles), accumulating
// in fp32; weights, stash and everything else as bf16.
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
	// F8 is the fp8 recipe of the linear layers' GEMMs (zero: none).
	F8 Float8
}

// Recipe is how fp8 operands are scaled.
type Recipe uint8

// The recipes.
const (
	NoFP8 Recipe = iota
	// Delayed is per-tensor delayed scaling (Micikevicius et al. 2022,
	// Transformer Engine's DelayedScaling): each GEMM operand of each
	// linear layer has one scale per step, from the largest amax of its
	// last History steps, reduced over the ranks that hold the tensor;
	// forward operands e4m3, gradients e5m2.
	Delayed
	// Blockwise is DeepSeek-V3's fine-grained scaling: a scale per 1×Tile
	// tile of an activation or gradient along the GEMM's reduction
	// dimension and per Tile×Tile block of a weight, from the tile's own
	// amax; every operand e4m3.
	Blockwise
)

// ParseRecipe accepts "delayed" and "blockwise".
func ParseRecipe(s string) (Recipe, error) {
	switch s {
	case "delayed":
		return Delayed, nil
	case "blockwise":
		return Blockwise, nil
	}
	return NoFP8, fmt.Errorf("precision: unknown fp8 recipe %q (want delayed or blockwise)", s)
}

func (r Recipe) String() string {
	switch r {
	case Delayed:
		return "delayed"
	case Blockwise:
		return "blockwise"
	}
	return "none"
}

// Float8 is an fp8 recipe and its settings.
type Float8 struct {
	Recipe  Recipe
	History int // Delayed: steps of amax history (TE's amax_history_len)
	Margin  int // Delayed: the scale is divided by 2^Margin
	Tile    int // Blockwise: the tile edge (DeepSeek-V3: 128)
}

// DefaultFP8 is recipe r with the defaults: a history of 16 steps, margin
// 0, tiles of 128.
func DefaultFP8(r Recipe) Float8 { return Float8{Recipe: r, History: 16, Tile: 128} }

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

// FP8 is BF16 with the linear layers' GEMMs on fp8 operands under f.
func FP8(f Float8) Policy {
	p := BF16()
	p.F8 = f
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
	case p.F8.Recipe != NoFP8 && p.Compute != tensor.BF16:
		return fmt.Errorf("precision: fp8 with compute=%s: the fp8 GEMMs' operands are dequantised into bf16", p.Compute)
	case p.F8.Recipe > Blockwise:
		return fmt.Errorf("precision: fp8 recipe %d: want delayed or blockwise", p.F8.Recipe)
	case p.F8.Recipe == Delayed && (p.F8.History < 1 || p.F8.Margin < 0):
		return fmt.Errorf("precision: fp8 history=%d margin=%d: want a history >= 1 and a margin >= 0", p.F8.History, p.F8.Margin)
	case p.F8.Recipe == Blockwise && p.F8.Tile < 1:
		return fmt.Errorf("precision: fp8 tile=%d: want a tile >= 1", p.F8.Tile)
	case p.LossScale.Dynamic && !(p.LossScale.Initial >= 1 && p.LossScale.Window >= 1):
		return fmt.Errorf("precision: loss scale %g with window %d: want a scale >= 1 and a window >= 1", p.LossScale.Initial, p.LossScale.Window)
	}
	return nil
}

// String names the compute dtype ("fp32", "bf16", "fp16"), or "fp8".
func (p Policy) String() string {
	if p.F8.Recipe != NoFP8 {
		return "fp8"
	}
	return p.Compute.String()
}
