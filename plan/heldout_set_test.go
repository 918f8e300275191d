package plan

import "fmt"

// heldOutSet is the published large runs the planner is validated on
// beyond the three sources it was built against (docs/PLANNER.md,
// "Held-out validation"). Each fix pins what the source states (and the
// rank order of the framework: tp, then dp, then pp for Megatron and
// DeepSpeed; [TP, CP, PP, DP] for Llama 3); the planner chooses the rest,
// as the authors tuned theirs. The tolerance is the error reached today
// plus a few points, so regressions show; the rows that miss ±15% are in
// heldOutZeRO3, and
// docs/PLANNER.md says why.
func heldOutSet() []heldOut {
	const (
		a100 = "dgx-a100"
		h100 = "dgx-h100"
		mds  = "megatron-deepspeed-a100.toml" // DeepSpeed's pipeline engine and bf16 optimizer
	)
	const mtnlg = "tp=8,pp=35,cp=1,zero=1,sp=off,mbs=1,schedule=1f1b,recompute=full,precision=bf16,flash=off"
	const mcore = "tp=%d,pp=%d,cp=1,zero=1,precision=bf16,flash=on"
	mc := func(model string, tp, pp, gpus, batch int, tflops, tol float64) heldOut {
		return heldOut{"Megatron-LM README, H100 weak scaling", model, h100, gpus, 4096, batch,
			fmt.Sprintf(mcore, tp, pp), "tflops", tflops, tol}
	}
	const nemo, bridge = "NeMo 24.07 performance summary, DGX-H100 FP8", "Megatron-Bridge 25.11 performance summary, DGX-H100 FP8"
	return []heldOut{
		// A100 era: DeepSpeed, FSDP, Megatron-LM.
		{"BLOOM (bigscience tr11-176B-ml README)", "bloom-176b", "jean-zay-a100.toml", 384, 2048, 2048,
			"dp=8,tp=4,pp=12,cp=1,zero=1,sp=off,mbs=2,schedule=1f1b,recompute=full,precision=bf16,flash=off", "hw_tflops", 150, 0.08},
		{"GPT-NeoX-20B (Black et al. 2022, §3)", "gpt-neox-20b", "neox-a100-40gb.toml", 96, 2048, 1536,
			"dp=12,tp=2,pp=4,cp=1,zero=1,sp=off,mbs=4,schedule=1f1b,recompute=full,precision=fp16,flash=off,order=tp-cp-dp-pp", "tflops", 117, 0.06},
		{"MT-NLG (Smith et al. 2022, §2.3)", "mt-nlg-530b", mds, 2240, 2048, 1920, mtnlg, "step_s", 60.1, 0.08},
		{"MT-NLG (Smith et al. 2022, §2.3)", "mt-nlg-530b", mds, 2800, 2048, 1920, mtnlg, "step_s", 50.2, 0.09},
		{"MT-NLG (Smith et al. 2022, §2.3)", "mt-nlg-530b", mds, 3360, 2048, 1920, mtnlg, "step_s", 44.4, 0.12},
		{"GPT-3 175B (Narayanan et al. 2021, §5.1)", "megatron-175b", a100, 1024, 2048, 1536,
			"tp=8,pp=8,cp=1,zero=0,sp=off,recompute=full,precision=fp16,flash=off", "hw_tflops", 140, 0.15},
		{"OPT-175B (Zhang et al. 2022, §2.4)", "opt-175b", a100, 992, 2048, 992,
			"dp=124,tp=8,pp=1,cp=1,zero=3,sp=off,recompute=full,precision=fp16,flash=off", "hw_tflops", 147, 0.15},
		// H100, bf16: Megatron-Core r0.8.0 (July 2024), with --tp-comm-overlap.
		mc("mcore-1.7b", 1, 1, 48, 192, 408.8, 0.15),
		mc("mcore-7.1b", 2, 1, 96, 192, 465.9, 0.11),
		mc("mcore-16b", 4, 1, 192, 192, 489.1, 0.08),
		mc("mcore-32b", 8, 1, 384, 192, 459.6, 0.10),
		mc("mcore-70b", 8, 2, 768, 384, 419.7, 0.20), // a miss: the planner's mbs=4 beats the published run
		mc("mcore-119b", 8, 4, 1536, 768, 420.5, 0.11),
		mc("mcore-177b", 8, 6, 2304, 1152, 432.8, 0.09),
		mc("mcore-314b", 8, 8, 3072, 1536, 474.4, 0.13),
		mc("mcore-462b", 8, 16, 6144, 3072, 459.9, 0.12),
		{"Megatron-LM README, H100 strong scaling (47% MFU)", "mcore-177b", h100, 96, 4096, 1152,
			"tp=8,cp=1,zero=1,precision=bf16,flash=on", "tflops", 0.47 * 989.4, 0.05},
		{"Megatron-LM README, H100 strong scaling (42% MFU)", "mcore-177b", h100, 4608, 4096, 1152,
			"tp=8,cp=1,zero=1,precision=bf16,flash=on", "tflops", 0.42 * 989.4, 0.09},
		// H100, bf16: Meta's Llama 3 405B (Table 4), attention counted causally.
		{"Llama 3 (Dubey et al. 2024, Table 4)", "llama3-405b", h100, 8192, 8192, 2048,
			"dp=64,tp=8,pp=16,cp=1,mbs=1,precision=bf16,flash=on,order=tp-cp-pp-dp", "tflops_causal", 430, 0.14},
		{"Llama 3 (Dubey et al. 2024, Table 4)", "llama3-405b", h100, 16384, 8192, 2048,
			"dp=128,tp=8,pp=16,cp=1,mbs=1,precision=bf16,flash=on,order=tp-cp-pp-dp", "tflops_causal", 400, 0.13},
		{"Llama 3 (Dubey et al. 2024, Table 4)", "llama3-405b", h100, 16384, 131072, 128,
			"dp=8,tp=8,pp=16,cp=16,mbs=1,precision=bf16,flash=on,order=tp-cp-pp-dp", "tflops_causal", 380, 0.05},
		// H100, fp8: NVIDIA's NeMo and Megatron-Bridge recipes.
		{bridge, "llama3-8b", h100, 8, 8192, 128,
			"dp=8,tp=1,pp=1,cp=1,zero=3,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 14451, 0.09},
		{bridge, "llama3-70b", h100, 64, 8192, 128,
			"dp=2,tp=4,pp=8,cp=1,vpp=5,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 1602, 0.11},
		{bridge, "llama3-405b", h100, 1024, 8192, 512,
			"dp=8,tp=8,pp=8,cp=2,vpp=8,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 292, 0.06},
		{nemo, "gpt3-175b", h100, 128, 2048, 256,
			"dp=4,tp=4,pp=8,cp=1,vpp=6,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 726, 0.05},
		{nemo, "gpt3-175b", h100, 512, 2048, 2048,
			"dp=16,tp=4,pp=8,cp=1,vpp=6,schedule=interleaved,mbs=2,precision=fp8,flash=on", "tokens_per_gpu", 782, 0.05},
		{nemo, "llama2-7b", h100, 8, 4096, 128,
			"dp=8,tp=1,pp=1,cp=1,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 16847, 0.09},
		{nemo, "llama2-13b", h100, 16, 4096, 128,
			"dp=4,tp=1,pp=4,cp=1,vpp=10,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 8646, 0.10},
		{nemo, "llama2-70b", h100, 64, 4096, 128,
			"dp=4,tp=4,pp=4,cp=1,vpp=20,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 1707, 0.09},
		{nemo, "llama3-8b", h100, 8, 8192, 128,
			"dp=4,tp=1,pp=1,cp=2,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 12036, 0.15},
		{nemo, "llama3-70b", h100, 64, 8192, 128,
			"dp=2,tp=4,pp=4,cp=2,vpp=5,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 1533, 0.06},
	}
}

// heldOutZeRO3 is the ZeRO-3/FSDP runs with one small micro-batch per
// device, where the parameter gathers are largest against the compute:
// torchtitan's FSDP2 table (docs/performance.md, 64 A100-80GB, local batch
// 1 or 2, bf16 with fp32 reduction) and MosaicML llm-foundry's FSDP
// FULL_SHARD table (scripts/train/benchmarking/README.md, MPT-70B, full
// activation checkpointing, "1600 Gbps" RoCE: 8 × 200 Gb/s per node, the
// dgx-a100 presets' rails; Composer's BACKWARD_POST prefetch, the
// testdata/composer-*.toml files; "bf16 PURE" reduces gradients in 16 bits, costed
// as fp16, whose costs are bf16's with 2-byte gradients). The tolerance is
// the error reached plus a few points; the 64-GPU A100-40GB row, two
// sequences per GPU, is a miss docs/PLANNER.md explains.
func heldOutZeRO3() []heldOut {
	const tt, mosaic = "torchtitan docs/performance.md, FSDP2", "MosaicML llm-foundry benchmarks, FSDP FULL_SHARD"
	const fsdp = "dp=%d,tp=1,pp=1,cp=1,zero=3,mbs=%d,recompute=%s,precision=%s,flash=on"
	f := func(dp, mbs int, rc, prec string) string { return fmt.Sprintf(fsdp, dp, mbs, rc, prec) }
	return []heldOut{
		{tt, "llama3-70b", "dgx-a100", 64, 8192, 64, f(64, 1, "full", "bf16"), "tokens_per_gpu", 331, 0.08},
		{tt, "llama2-70b", "dgx-a100", 64, 4096, 128, f(64, 2, "full", "bf16"), "tokens_per_gpu", 353, 0.08},
		{tt, "llama2-13b", "dgx-a100", 64, 4096, 128, f(64, 2, "none", "bf16"), "tokens_per_gpu", 2162, 0.15},
		{mosaic + " (A100-40GB)", "mpt-70b", "composer-a100-40gb.toml", 64, 2048, 128, f(64, 2, "full", "fp16"), "tokens_per_gpu", 276, 0.36},
		{mosaic + " (A100-40GB)", "mpt-70b", "composer-a100-40gb.toml", 128, 2048, 512, f(128, 4, "full", "fp16"), "tokens_per_gpu", 376, 0.09},
		{mosaic + " (A100-80GB)", "mpt-70b", "composer-a100.toml", 32, 2048, 1024, f(32, 2, "full", "fp16"), "tokens_per_gpu", 373, 0.09},
		{mosaic + " (A100-80GB)", "mpt-70b", "composer-a100.toml", 64, 2048, 2048, f(64, 8, "full", "fp16"), "tokens_per_gpu", 410, 0.06},
		{mosaic + " (H100)", "mpt-70b", "composer-h100.toml", 32, 2048, 1024, f(32, 2, "full", "bf16"), "tokens_per_gpu", 882, 0.09},
		{mosaic + " (H100)", "mpt-70b", "composer-h100.toml", 64, 2048, 2048, f(64, 8, "full", "bf16"), "tokens_per_gpu", 1039, 0.05},
	}
}
