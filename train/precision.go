package train

import (
	"strings"

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

// runPlanText is the plan as the run line shows it: Short, which leaves
// out the planner's defaults (bf16 among them), with the precision always
// named.
func runPlanText(p plan.Plan) string {
	s := p.Short()
	if !strings.Contains(s, "precision=") {
		s += ",precision=" + string(p.Precision)
	}
	return s
}
