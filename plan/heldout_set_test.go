package plan

import "fmt"

var sprintf = fmt.Sprintf

// heldOutSet is the published large runs the planner is validated on
// beyond the three sources it was built against (docs/PLANNER.md,
// "Held-out validation"). Each fix pins what the source states.
func heldOutSet() []heldOut {
	const (
		a100 = "dgx-a100"
		h100 = "dgx-h100"
	)
	const mtnlg = "tp=8,pp=35,cp=1,zero=1,sp=off,mbs=1,schedule=1f1b,recompute=full,precision=bf16,flash=off"
	const mcore = "tp=%d,pp=%d,cp=1,zero=1,precision=bf16,flash=on"
	mc := func(model string, tp, pp, gpus, batch int, tflops float64) heldOut {
		return heldOut{"Megatron-LM README, H100 weak scaling", model, h100, gpus, 4096, batch,
			sprintf(mcore, tp, pp), "tflops", tflops, 1}
	}
	set := []heldOut{
		{"BLOOM (bigscience tr11 README)", "bloom-176b", "jean-zay-a100.toml", 384, 2048, 2048,
			"dp=8,tp=4,pp=12,cp=1,zero=1,sp=off,mbs=2,schedule=1f1b,recompute=full,precision=bf16,flash=off", "hw_tflops", 150, 1},
		{"GPT-NeoX-20B (Black et al. 2022, §3)", "gpt-neox-20b", "neox-a100-40gb.toml", 96, 2048, 1536,
			"dp=12,tp=2,pp=4,cp=1,zero=1,sp=off,mbs=4,schedule=1f1b,recompute=full,precision=fp16,flash=off", "hw_tflops", 117, 1},
		{"MT-NLG (Smith et al. 2022, §2.3)", "mt-nlg-530b", a100, 2240, 2048, 1920, mtnlg, "step_s", 60.1, 1},
		{"MT-NLG (Smith et al. 2022, §2.3)", "mt-nlg-530b", a100, 2800, 2048, 1920, mtnlg, "step_s", 50.2, 1},
		{"MT-NLG (Smith et al. 2022, §2.3)", "mt-nlg-530b", a100, 3360, 2048, 1920, mtnlg, "step_s", 44.4, 1},
		{"OPT-175B (Zhang et al. 2022, §2.4)", "opt-175b", a100, 992, 2048, 992,
			"dp=124,tp=8,pp=1,cp=1,zero=3,sp=off,recompute=full,precision=fp16,flash=off", "hw_tflops", 147, 1},
		mc("mcore-1.7b", 1, 1, 48, 192, 408.8),
		mc("mcore-7.1b", 2, 1, 96, 192, 465.9),
		mc("mcore-16b", 4, 1, 192, 192, 489.1),
		mc("mcore-32b", 8, 1, 384, 192, 459.6),
		mc("mcore-70b", 8, 2, 768, 384, 419.7),
		mc("mcore-119b", 8, 4, 1536, 768, 420.5),
		mc("mcore-177b", 8, 6, 2304, 1152, 432.8),
		mc("mcore-314b", 8, 8, 3072, 1536, 474.4),
		mc("mcore-462b", 8, 16, 6144, 3072, 459.9),
		{"Megatron-LM README, H100 strong scaling (47% MFU)", "mcore-177b", h100, 96, 4096, 1152,
			"tp=8,cp=1,zero=1,precision=bf16,flash=on", "tflops", 0.47 * 989.4, 1},
		{"Megatron-LM README, H100 strong scaling (42% MFU)", "mcore-177b", h100, 4608, 4096, 1152,
			"tp=8,cp=1,zero=1,precision=bf16,flash=on", "tflops", 0.42 * 989.4, 1},
		{"Llama 3 (Dubey et al. 2024, Table 4)", "llama3-405b", h100, 8192, 8192, 2048,
			"dp=64,tp=8,pp=16,cp=1,mbs=1,precision=bf16,flash=on", "tflops", 430, 1},
		{"Llama 3 (Dubey et al. 2024, Table 4)", "llama3-405b", h100, 16384, 8192, 2048,
			"dp=128,tp=8,pp=16,cp=1,mbs=1,precision=bf16,flash=on", "tflops", 400, 1},
		{"Llama 3 (Dubey et al. 2024, Table 4)", "llama3-405b", h100, 16384, 131072, 128,
			"dp=8,tp=8,pp=16,cp=16,mbs=1,precision=bf16,flash=on", "tflops", 380, 1},
		{"Megatron-Bridge 25.11, DGX-H100 FP8", "llama3-8b", h100, 8, 8192, 128,
			"dp=8,tp=1,pp=1,cp=1,zero=3,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 14451, 1},
		{"Megatron-Bridge 25.11, DGX-H100 FP8", "llama3-70b", h100, 64, 8192, 128,
			"dp=2,tp=4,pp=8,cp=1,vpp=5,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 1602, 1},
		{"Megatron-Bridge 25.11, DGX-H100 FP8", "llama3-405b", h100, 1024, 8192, 512,
			"dp=8,tp=8,pp=8,cp=2,vpp=8,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 292, 1},
		{"NeMo 24.07, DGX-H100 FP8", "gpt3-175b", h100, 128, 2048, 256,
			"dp=4,tp=4,pp=8,cp=1,vpp=6,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 726, 1},
		{"NeMo 24.07, DGX-H100 FP8", "gpt3-175b", h100, 512, 2048, 2048,
			"dp=16,tp=4,pp=8,cp=1,vpp=6,schedule=interleaved,mbs=2,precision=fp8,flash=on", "tokens_per_gpu", 782, 1},
		{"NeMo 24.07, DGX-H100 FP8", "llama2-7b", h100, 8, 4096, 128,
			"dp=8,tp=1,pp=1,cp=1,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 16847, 1},
		{"NeMo 24.07, DGX-H100 FP8", "llama2-13b", h100, 16, 4096, 128,
			"dp=4,tp=1,pp=4,cp=1,vpp=10,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 8646, 1},
		{"NeMo 24.07, DGX-H100 FP8", "llama2-70b", h100, 64, 4096, 128,
			"dp=4,tp=4,pp=4,cp=1,vpp=20,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 1707, 1},
		{"NeMo 24.07, DGX-H100 FP8", "llama3-8b", h100, 8, 8192, 128,
			"dp=4,tp=1,pp=1,cp=2,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 12036, 1},
		{"NeMo 24.07, DGX-H100 FP8", "llama3-70b", h100, 64, 8192, 128,
			"dp=2,tp=4,pp=4,cp=2,vpp=5,schedule=interleaved,mbs=1,precision=fp8,flash=on", "tokens_per_gpu", 1533, 1},
	}
	return set
}
