package train

import (
	"trellis/plan"
	"trellis/tensor"
)

// computeType is the linear layers' GEMM precision for a plan's precision:
// bf16 runs them in bf16 with fp32 master weights, Adam moments, gradients
// and reductions (Megatron's convention, the planner's plan/memory.go);
// everything else in fp32. checkSupported refuses the rest by name.
func computeType(p plan.Precision) tensor.DType {
	if p == plan.BF16 {
		return tensor.BF16
	}
	return tensor.F32
}
