package plan

import (
	"fmt"
	"strconv"
	"strings"
)

// torchtitanVersion is the torchtitan release the mapping matches: the
// dataclasses of torchtitan/config/job_config.py at tag v0.2.0
// (https://github.com/pytorch/torchtitan), whose field names are the job
// TOML's keys, the llama3 model's module names (tok_embeddings, layers.N,
// norm, output) of torchtitan/models/llama3/model/model.py, and the
// float8 converter's registered name (quantize.linear.float8). Pipeline
// schedule names are PyTorch's (torch.distributed.pipelining).
const torchtitanVersion = "torchtitan v0.2.0"

// torchtitanTable maps each job-TOML key the planner writes or reads to
// what it carries.
func torchtitanTable() []fwArg {
	return []fwArg{
		{"model.name", "the model (llama3 for the Llama 3 presets)"},
		{"model.flavor", "the model size (8B, 70B, 405B)"},
		{"model.converters", `["quantize.linear.float8"]: precision=fp8`},
		{"training.local_batch_size", "pp=1: mbs (the rest is gradient accumulation); pp>1: the global batch over dp"},
		{"training.global_batch_size", "global batch"},
		{"training.seq_len", "seq"},
		{"training.mixed_precision_param", "bfloat16: precision=bf16; float32: precision=fp32"},
		{"training.mixed_precision_reduce", "float32 (the planner's bf16 reduces gradients in fp32)"},
		{"parallelism.data_parallel_replicate_degree", "dp when zero=0"},
		{"parallelism.data_parallel_shard_degree", "dp when zero=3 (FSDP2 over dp·cp); -1: the devices left"},
		{"parallelism.fsdp_reshard_after_forward", `"always": zero=3 gathers parameters in the forward and again in the backward`},
		{"parallelism.tensor_parallel_degree", "tp (with sp=on: torchtitan shards the norms' sequence)"},
		{"parallelism.context_parallel_degree", "cp"},
		{"parallelism.pipeline_parallel_degree", "pp"},
		{"parallelism.pipeline_parallel_schedule", "schedule: 1F1B, GPipe, Interleaved1F1B"},
		{"parallelism.pipeline_parallel_microbatch_size", "mbs (pp>1)"},
		{"parallelism.module_fqns_per_model_part", "the layer split over pp·vpp chunks (chunk c on rank c mod pp; DualPipeV: 2·pp chunks in a V)"},
		{"parallelism.expert_parallel_degree", "ep (models with experts)"},
		{"parallelism.expert_tensor_parallel_degree", "etp: 1 or tp"},
		{"activation_checkpoint.mode", "recompute: none, full, selective"},
		{"activation_checkpoint.selective_ac_option", `"op": recompute=selective (per-op)`},
	}
}

// torchtitanSchedules names PyTorch's schedules for the planner's.
func torchtitanSchedules() map[Schedule]string {
	return map[Schedule]string{OneFOneB: "1F1B", GPipe: "GPipe", Interleaved: "Interleaved1F1B", DualPipeV: "DualPipeV"}
}

// torchtitanRules: zb-h1 (PyTorch's zero-bubble schedules are interleaved
// or V-shaped) and DualPipe (it has DualPipeV), rank orders other than its
// mesh's (pp, dp_replicate, dp_shard, cp, tp from slowest: tp-cp-dp-pp),
// tensor parallelism without sequence parallelism, ZeRO-1/2 (FSDP2 is
// ZeRO-3; DDP is ZeRO-0; context parallel ranks always join the FSDP
// mesh), attention without flash (SDPA's flash kernel), fp16, and expert
// degrees outside its constraints (torchtitanExpertRule).
func torchtitanRules() []fwRule {
	const tt = "torchtitan"
	return []fwRule{
		func(j Job, p Plan) ([]Plan, string) {
			if p.Schedule != DualPipe {
				return nil, ""
			}
			q := p
			q.Schedule = DualPipeV
			return []Plan{q}, "torchtitan has DualPipeV (PyTorch's ScheduleDualPipeV), not the bidirectional DualPipe"
		},
		scheduleRule(tt, OneFOneB, GPipe, Interleaved, DualPipeV),
		orderRule(tt, "tp-cp-dp-pp"),
		keyRule(tt, "sp", "with tp>1: its tensor parallelism always shards the norms' sequence",
			func(p Plan) bool { return p.TP == 1 || p.SP }, "on"),
		keyRule(tt, "zero", "with cp>1: context-parallel ranks shard parameters with FSDP2",
			func(p Plan) bool { return p.CP == 1 || p.ZeRO == 3 }, "3"),
		zeroRule(tt+" (FSDP2 or DDP)", 0, 3),
		keyRule(tt, "flash", "is not available: its attention is SDPA's flash kernel", func(p Plan) bool { return p.Flash }, "on"),
		keyRule(tt, "precision", "is not offered (mixed precision is bf16 or fp32)", func(p Plan) bool { return p.Precision != FP16 }, "bf16"),
		torchtitanExpertRule,
	}
}

// chunkLayers is the layers of each of the C = pp·vpp chunks under the
// planner's split (see partition: the lighter chunks at the ends).
func chunkLayers(L, C int) []int {
	q, d := splitCounts(L, C)
	out := make([]int, C)
	for c := range out {
		out[c] = q
		if d > 0 {
			out[c] = q + 1
		}
	}
	for i := 0; i < d; i++ {
		c := i / 2
		if i%2 == 0 {
			c = C - 1 - i/2
		}
		out[c] = q
	}
	return out
}

// torchtitanTOML writes p as a torchtitan job file.
func (j Job) torchtitanTOML(p Plan) string {
	var b strings.Builder
	m := j.Model
	fmt.Fprintf(&b, "# %s job configuration (trellis plan)\n", torchtitanVersion)
	name, flavor := torchtitanFlavor(m)
	if name != "llama3" {
		fmt.Fprintf(&b, "# torchtitan has no model %q: add one (L=%d, h=%d, heads=%d, kv=%d, ffn=%d, V=%d) under that name\n",
			m.Name, m.Layers, m.Hidden, m.Heads, m.KVHeads, m.FFN, m.Vocab)
	}
	fmt.Fprintf(&b, "[model]\nname = %q\nflavor = %q\n", name, flavor)
	if p.Precision == FP8 {
		b.WriteString("converters = [\"quantize.linear.float8\"]\n")
	}
	local := p.MBS
	if p.PP > 1 {
		local = j.GlobalBatch / p.DP
	}
	param := map[bool]string{true: "float32", false: "bfloat16"}[p.Precision == FP32]
	fmt.Fprintf(&b, "\n[training]\nlocal_batch_size = %d\nglobal_batch_size = %d\nseq_len = %d\nmixed_precision_param = %q\nmixed_precision_reduce = \"float32\"\n",
		local, j.GlobalBatch, j.Seq, param)
	rep, shard := p.DP, 1
	if p.ZeRO == 3 {
		rep, shard = 1, p.DP
	}
	fmt.Fprintf(&b, "\n[parallelism]\ndata_parallel_replicate_degree = %d\ndata_parallel_shard_degree = %d\n", rep, shard)
	if p.ZeRO == 3 {
		b.WriteString("fsdp_reshard_after_forward = \"always\"\n")
	}
	fmt.Fprintf(&b, "tensor_parallel_degree = %d\ncontext_parallel_degree = %d\npipeline_parallel_degree = %d\n", p.TP, p.CP, p.PP)
	if m.moe() {
		ep, etp := p.Experts()
		fmt.Fprintf(&b, "expert_parallel_degree = %d\nexpert_tensor_parallel_degree = %d\n", ep, etp)
	}
	if p.PP > 1 {
		fmt.Fprintf(&b, "pipeline_parallel_schedule = %q\npipeline_parallel_microbatch_size = %d\n", torchtitanSchedules()[p.Schedule], p.MBS)
		b.WriteString("module_fqns_per_model_part = [\n")
		next := 0
		chunks := chunkLayers(m.Layers, p.PP*p.chunks())
		for c, n := range chunks {
			var names []string
			if c == 0 {
				names = append(names, `"tok_embeddings"`)
			}
			for i := 0; i < n; i++ {
				names = append(names, fmt.Sprintf(`"layers.%d"`, next+i))
			}
			next += n
			if c == len(chunks)-1 {
				names = append(names, `"norm"`, `"output"`)
			}
			fmt.Fprintf(&b, "  [%s],\n", strings.Join(names, ", "))
		}
		b.WriteString("]\n")
	}
	mode := map[Recompute]string{RecomputeNone: "none", RecomputeFull: "full", RecomputeSelective: "selective"}[p.Recompute]
	fmt.Fprintf(&b, "\n[activation_checkpoint]\nmode = %q\n", mode)
	if p.Recompute == RecomputeSelective {
		b.WriteString("selective_ac_option = \"op\"\n")
	}
	return b.String()
}

// torchtitanFlavor names the model as torchtitan does: the Llama 3
// presets are llama3's flavors; any other model is named as the planner
// names it (torchtitan needs a flavor of that shape added).
func torchtitanFlavor(m Model) (name, flavor string) {
	if f, ok := strings.CutPrefix(m.Name, "llama3-"); ok {
		return "llama3", strings.ToUpper(f)
	}
	switch m.Name { // torchtitan v0.2.0's deepseek_v3 and qwen3 flavors
	case "deepseek-v3":
		return "deepseek_v3", "671B"
	case "deepseek-v2-lite":
		return "deepseek_v3", "16B"
	case "qwen3-30b-a3b":
		return "qwen3", "30B-A3B"
	case "qwen3-235b-a22b":
		return "qwen3", "235B-A22B"
	}
	return m.Name, m.Name
}

// torchtitanExpertRule holds ep and etp to torchtitan v0.2.0's constraints
// (job_config.py, Parallelism.expert_parallel_degree): etp = tp with cp ≤
// ep ≤ dp_shard·cp, cp | ep and ep | dp_shard·cp; or etp = 1 with cp·tp |
// ep and ep | dp_shard·cp·tp (dp_shard = dp under FSDP2, 1 under DDP). The
// nearest are the largest ep it allows with etp 1 and with etp = tp.
func torchtitanExpertRule(j Job, p Plan) ([]Plan, string) {
	if !j.Model.moe() {
		return nil, ""
	}
	ep, etp := p.Experts()
	ok := func(ep, etp int) bool {
		shard := 1
		if p.ZeRO == 3 {
			shard = p.DP
		}
		switch {
		case ep == 1: // torchtitan splits the experts as the MLP: etp = tp
			return etp == p.TP
		case etp == p.TP:
			return ep%p.CP == 0 && (shard*p.CP)%ep == 0
		case etp == 1:
			return ep%(p.CP*p.TP) == 0 && (shard*p.CP*p.TP)%ep == 0
		}
		return false
	}
	if ok(ep, etp) {
		return nil, ""
	}
	var alts []Plan
	for _, e := range []int{1, p.TP} {
		for _, d := range divisors(j.Model.experts().Experts) {
			if d <= ep && ok(d, e) && (j.Model.experts().FFN%e == 0) {
				q := p
				q.SetExperts(d, e)
				alts = append(alts, q)
			}
		}
	}
	return alts, fmt.Sprintf("torchtitan runs ep=%d with etp=%d only under its constraints (ep = 1: etp = tp; etp = tp: cp | ep | dp_shard·cp; etp = 1: cp·tp | ep | dp_shard·cp·tp)", ep, etp)
}

// torchtitanChunks reads module_fqns_per_model_part as layers per chunk,
// checking that the layers run in order and that the embedding opens the
// first chunk and the output layer closes the last.
func torchtitanChunks(parts [][]string, L int) ([]int, error) {
	var out []int
	next := 0
	for c, part := range parts {
		n := 0
		for i, name := range part {
			switch {
			case name == "tok_embeddings" && c == 0 && i == 0:
			case (name == "norm" || name == "output") && c == len(parts)-1:
			case strings.HasPrefix(name, "layers."):
				k, err := strconv.Atoi(strings.TrimPrefix(name, "layers."))
				if err != nil || k != next {
					return nil, fmt.Errorf("plan: torchtitan: module_fqns_per_model_part: %q in part %d: want layers.%d next", name, c, next)
				}
				next++
				n++
			default:
				return nil, fmt.Errorf("plan: torchtitan: module_fqns_per_model_part: %q in part %d is not a module the planner places there", name, c)
			}
		}
		out = append(out, n)
	}
	if next != L {
		return nil, fmt.Errorf("plan: torchtitan: module_fqns_per_model_part places %d layers, the model has %d", next, L)
	}
	return out, nil
}
