package plan

// FP8Recipe names the fp8 recipe the cost model assumes for p ("" when p
// is not fp8): Transformer Engine's per-tensor delayed scaling (e4m3
// forward operands, e5m2 gradients, scales from an amax history; each
// GEMM input cast once, each weight's fp8 copy once per step; fp32
// accumulation), with DeepSeek-V3's blockwise fp8 dispatch (one fp32
// scale per 128 values) on a cluster with moe_fp8_dispatch. Its memory
// and time follow from it (docs/PLANNER.md, "Memory model", "Time
// model").
func (j Job) FP8Recipe(p Plan) string {
	if p.Precision != FP8 {
		return ""
	}
	r := "per-tensor delayed scaling (Transformer Engine: e4m3 forward, e5m2 gradients, amax history; fp8 GEMM operands, fp32 accumulation, bf16 elsewhere)"
	if j.Model.moe() && j.Cluster.Software.MoE.FP8Dispatch {
		r += ", expert dispatch in fp8 with one scale per 128 values (DeepSeek-V3)"
	}
	return r
}
