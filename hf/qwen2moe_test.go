package hf

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"trellis/model"
	"trellis/safetensors"
)

// tinyMoE is the exported MoE model: five layers of which 1 and 3 are MoE
// (dense_first 1, moe_every 2), 6 experts of width 24 with top-2, dense
// layers of width 56, 5 query heads on one key/value head, widths that
// are not powers of two, untied, with an aux loss.
func tinyMoE() model.Config {
	return model.Config{Arch: "llama", Layers: 5, Hidden: 40, Heads: 5, KVHeads: 1, FFN: 56, SeqLen: 16, Vocab: 67,
		RopeTheta: 1000, NormEps: 1e-6, Experts: 6, TopK: 2, ExpertFFN: 24, DenseFirst: 1, MoEEvery: 2, AuxLoss: 0.01}
}

// moeWeights are weights() with the routers scaled ×20, so that the
// routing is decisive (margins far above rounding) and the experts'
// choice matters.
func moeWeights(t *testing.T, cfg model.Config) []float32 {
	w := weights(t, cfg)
	for _, u := range cfg.Layout().Units {
		for _, x := range u.Tensors {
			if strings.HasSuffix(x.Name, ".mlp.gate.weight") {
				for i := x.Offset; i < x.Offset+x.Size; i++ {
					w[i] *= 20
				}
			}
		}
	}
	return w
}

// TestMoERoundTrip: an MoE Llama, tied and untied, survives Write and Read
// bit for bit in F32 (within rounding in BF16), its configuration as the
// canonical one.
func TestMoERoundTrip(t *testing.T) {
	for _, tied := range []bool{false, true} {
		cfg := tinyMoE()
		cfg.TieEmbeddings = tied
		w := moeWeights(t, cfg)
		for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
			dir := t.TempDir()
			if err := Write(dir, Model{Config: cfg, W: w}, dt); err != nil {
				t.Fatal(err)
			}
			m, err := Read(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Config != cfg.Canonical() {
				t.Fatalf("tied=%v %s: config %v, want %v", tied, dt, m.Config, cfg.Canonical())
			}
			if dt == safetensors.F32 {
				for i := range w {
					if math.Float32bits(m.W[i]) != math.Float32bits(w[i]) {
						t.Fatalf("tied=%v: element %d: %v, want %v", tied, i, m.W[i], w[i])
					}
				}
			} else if e := relErr(m.W, w); e > 4e-3 {
				t.Fatalf("tied=%v %s: weights differ by %.3g", tied, dt, e)
			}
		}
	}
}

// TestMoELayout: the file holds Qwen2MoeForCausalLM's tensors, names and
// shapes, each expert's matrices equal to its rows of Trellis's stacks,
// the biases and the shared expert's gate zero, the shared expert empty;
// config.json carries every field that decides the architecture.
func TestMoELayout(t *testing.T) {
	cfg := tinyMoE()
	w := moeWeights(t, cfg)
	dir := written(t, cfg, w)
	f, err := safetensors.ReadFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	C, E, Fe, F := 40, 6, 24, 56
	// embed, norm, lm_head; per layer 2 norms, q k v o, 3 biases; 3 dense
	// MLP matrices, or the router, 3E expert matrices, 3 empty shared and its gate.
	if n, want := len(f.Names()), 3+5*9+3*3+2*(1+3*E+4); n != want {
		t.Errorf("%d tensors, want %d", n, want)
	}
	lay := cfg.Layout()
	for name, shape := range map[string][]int{
		"model.layers.1.mlp.gate.weight": {E, C}, "model.layers.3.mlp.experts.5.gate_proj.weight": {Fe, C},
		"model.layers.3.mlp.experts.0.up_proj.weight": {Fe, C}, "model.layers.1.mlp.experts.2.down_proj.weight": {C, Fe},
		"model.layers.2.mlp.gate_proj.weight": {F, C}, "model.layers.4.mlp.down_proj.weight": {C, F},
		"model.layers.1.mlp.shared_expert.gate_proj.weight": {0, C}, "model.layers.1.mlp.shared_expert.down_proj.weight": {C, 0},
		"model.layers.3.mlp.shared_expert_gate.weight": {1, C}, "model.layers.0.self_attn.q_proj.bias": {C},
		"model.layers.0.self_attn.k_proj.bias": {8}, "lm_head.weight": {67, C},
	} {
		info, err := f.Info(name)
		if err != nil {
			t.Error(err)
			continue
		}
		if !slices.Equal(info.Shape, shape) {
			t.Errorf("%s: shape %v, want %v", name, info.Shape, shape)
		}
		if strings.HasSuffix(name, "bias") || strings.HasSuffix(name, "shared_expert_gate.weight") {
			v, _ := f.Float32(name)
			if slices.ContainsFunc(v, func(x float32) bool { return x != 0 }) {
				t.Errorf("%s is not zero", name)
			}
		}
	}
	gu, _ := lay.Tensor("layers.3.mlp.experts.gate_up_proj")
	down, _ := lay.Tensor("layers.3.mlp.experts.down_proj")
	for e := 0; e < E; e++ {
		g, _ := f.Float32("model.layers.3.mlp.experts." + strconv.Itoa(e) + ".gate_proj.weight")
		u, _ := f.Float32("model.layers.3.mlp.experts." + strconv.Itoa(e) + ".up_proj.weight")
		d, _ := f.Float32("model.layers.3.mlp.experts." + strconv.Itoa(e) + ".down_proj.weight")
		at := gu.Offset + e*2*Fe*C
		if !slices.Equal(g, w[at:at+Fe*C]) || !slices.Equal(u, w[at+Fe*C:at+2*Fe*C]) {
			t.Errorf("expert %d: gate_proj, up_proj are not rows [0, F_e) and [F_e, 2F_e) of its gate_up_proj", e)
		}
		if at := down.Offset + e*C*Fe; !slices.Equal(d, w[at:at+C*Fe]) {
			t.Errorf("expert %d: down_proj is not its slice of the stack", e)
		}
	}
	var js map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err := json.Unmarshal(raw, &js); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"model_type": "qwen2_moe", "hidden_size": 40.0, "num_hidden_layers": 5.0,
		"num_attention_heads": 5.0, "num_key_value_heads": 1.0, "head_dim": 8.0, "intermediate_size": 56.0,
		"num_experts": 6.0, "num_experts_per_tok": 2.0, "moe_intermediate_size": 24.0, "shared_expert_intermediate_size": 0.0,
		"norm_topk_prob": false, "decoder_sparse_step": 2.0, "router_aux_loss_coef": 0.01, "output_router_logits": true,
		"rms_norm_eps": 1e-6, "rope_theta": 1000.0, "tie_word_embeddings": false, "hidden_act": "silu", "qkv_bias": true,
		"use_sliding_window": false, "max_position_embeddings": 16.0, "vocab_size": 67.0} {
		if js[k] != v {
			t.Errorf("config.json %s = %v, want %v", k, js[k], v)
		}
	}
	if only, _ := json.Marshal(js["mlp_only_layers"]); string(only) != "[]" {
		t.Errorf("config.json mlp_only_layers = %s, want [] (decoder_sparse_step 2 makes layers 1 and 3 sparse)", only)
	}
	if arch, _ := js["architectures"].([]any); len(arch) != 1 || arch[0] != "Qwen2MoeForCausalLM" {
		t.Errorf("config.json architectures = %v", js["architectures"])
	}
}

// TestQwenSparseLayers: Qwen2-MoE's layer rule (sparse iff i ∉
// mlp_only_layers and (i+1) % decoder_sparse_step = 0) read as Trellis's
// dense_first and moe_every, and the patterns Trellis cannot express
// refused.
func TestQwenSparseLayers(t *testing.T) {
	for _, c := range []struct {
		L, step      int
		only         []int
		first, every int
		ok           bool
	}{
		{5, 1, nil, 0, 1, true},
		{5, 2, nil, 1, 2, true},         // layers 1, 3
		{6, 3, nil, 2, 3, true},         // layers 2, 5
		{5, 1, []int{0, 1}, 2, 1, true}, // dense first two
		{5, 1, []int{0, 2, 4}, 1, 2, true},
		{5, 1, []int{0, 1, 2, 3}, 4, 1, true},
		{5, 1, []int{0, 1, 2, 3, 4}, 5, 1, true}, // no MoE layer
		{5, 1, []int{0, 2}, 1, 2, false},         // 1, 3, 4
		{5, 2, []int{1}, 3, 2, true},             // 3 alone
	} {
		first, every, ok := moePattern(qwenSparse(c.L, 4, c.step, c.only))
		if ok != c.ok || (ok && (first != c.first || every != c.every)) {
			t.Errorf("L=%d step=%d only=%v: dense_first=%d moe_every=%d ok=%v, want %d %d %v", c.L, c.step, c.only, first, every, ok, c.first, c.every, c.ok)
		}
		if !ok {
			continue
		}
		cfg := model.Config{Layers: c.L, Experts: 4, DenseFirst: first, MoEEvery: every}
		for i, s := range qwenSparse(c.L, 4, c.step, c.only) {
			if cfg.MoELayer(i) != s {
				t.Errorf("L=%d step=%d only=%v: layer %d: Trellis MoE %v, Qwen sparse %v", c.L, c.step, c.only, i, cfg.MoELayer(i), s)
			}
		}
	}
	// mlp_only_layers=[0,2,4] with decoder_sparse_step=1 reads as the
	// export's decoder_sparse_step=2.
	js := `{"model_type":"qwen2_moe","hidden_size":40,"num_hidden_layers":5,"num_attention_heads":5,"num_key_value_heads":1,
		"intermediate_size":56,"vocab_size":67,"max_position_embeddings":16,"rms_norm_eps":1e-6,"rope_theta":1000,
		"num_experts":6,"num_experts_per_tok":2,"moe_intermediate_size":24,"shared_expert_intermediate_size":0,
		"mlp_only_layers":[0,2,4],"output_router_logits":true,"router_aux_loss_coef":0.01}`
	got, err := ParseModelConfig([]byte(js))
	if err != nil || got != tinyMoE().Canonical() {
		t.Fatalf("mlp_only_layers=[0,2,4]: %v (%v), want %v", got, err, tinyMoE().Canonical())
	}
	// Every dense_first and moe_every is written as a step and layers
	// Qwen's rule makes Trellis's MoE layers, and reads back as the same
	// layers; the compact form (a step, leading dense layers) where it is exact.
	for L := 1; L <= 9; L++ {
		for first := 0; first <= L; first++ {
			for every := 1; every <= 4; every++ {
				c := model.Config{Layers: L, Experts: 3, DenseFirst: first, MoEEvery: every}
				step, only := qwenLayers(c)
				sparse := qwenSparse(L, 3, step, only)
				f, e, ok := moePattern(sparse)
				back := model.Config{Layers: L, Experts: 3, DenseFirst: f, MoEEvery: e}
				for l, s := range sparse {
					if s != c.MoELayer(l) || !ok || back.MoELayer(l) != s {
						t.Fatalf("L=%d dense_first=%d moe_every=%d: step %d, mlp_only_layers %v: layer %d sparse %v, reads back as %d/%d (%v)", L, first, every, step, only, l, s, f, e, ok)
					}
				}
				if compact := (first+1)%every == 0; compact != (step == every) && c.MoELayers(0, L) > 1 {
					t.Errorf("L=%d dense_first=%d moe_every=%d: step %d, mlp_only_layers %v", L, first, every, step, only)
				}
			}
		}
	}
}

// TestMoEExportMatchesReference: Write's Qwen2MoeForCausalLM directory,
// run by scripts/py_qwen2moe.py (an independent float64 forward written
// from transformers' modeling_qwen2_moe.py: softmax router, top-k without
// renormalising, the biases and the sigmoid-gated shared expert as
// written, Qwen's sparse-layer rule), gives Trellis's logits within 1e-5
// relative. The fixture records the SHA-256 of the model.safetensors it
// was computed from and the smallest routing margin (the choice of
// experts must not hang on rounding); regenerate with
// go test ./hf -run TestMoEExportMatchesReference -torch (python3 alone).
func TestMoEExportMatchesReference(t *testing.T) {
	cfg := tinyMoE()
	w := moeWeights(t, cfg)
	dir := written(t, cfg, w)
	want, f := torchLogits(t, dir, "qwen2moe_logits.safetensors", "TestMoEExportMatchesReference", llamaTokens, "../scripts/py_qwen2moe.py", "logits")
	if m, err := strconv.ParseFloat(f.Metadata()["min_margin"], 64); err != nil || m < 1e-5 {
		t.Fatalf("fixture's smallest routing margin %q: want ≥ 1e-5 (100 times fp32 probabilities' error), so that rounding cannot change the experts", f.Metadata()["min_margin"])
	}
	got := trellisLogits(t, cfg, w, llamaTokens)
	if len(got) != len(want) {
		t.Fatalf("%d logits, fixture %d", len(got), len(want))
	}
	if e := relErr(got, want); e > 1e-5 {
		t.Fatalf("logits: relative error %.3g between Trellis and the reference, want ≤ 1e-5", e)
	}
	t.Logf("logits: relative error %.3g, smallest routing margin %s", relErr(got, want), f.Metadata()["min_margin"])
}

// TestMoEReadRefuses: what Trellis's MoE Llama does not compute is
// refused, naming the field or the tensor.
func TestMoEReadRefuses(t *testing.T) {
	cfg := tinyMoE()
	good := t.TempDir()
	if err := Write(good, Model{Config: cfg, W: moeWeights(t, cfg)}, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	js, _ := os.ReadFile(filepath.Join(good, ConfigFile))
	f, err := safetensors.ReadFile(filepath.Join(good, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	// with is good with config.json's old replaced by new and the tensors
	// edited by edit (nil: unchanged).
	with := func(t *testing.T, old, new string, edit func(safetensors.Tensor) (safetensors.Tensor, bool)) string {
		d := t.TempDir()
		if !strings.Contains(string(js), old) {
			t.Fatalf("config.json lacks %q", old)
		}
		if err := os.WriteFile(filepath.Join(d, ConfigFile), []byte(strings.Replace(string(js), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		var ts []safetensors.Tensor
		for _, n := range f.Names() {
			info, _ := f.Info(n)
			b, _ := f.Bytes(n)
			x := safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), b...)}
			keep := true
			if edit != nil {
				x, keep = edit(x)
			}
			if keep {
				ts = append(ts, x)
			}
		}
		if err := safetensors.WriteFile(filepath.Join(d, WeightsFile), ts, nil); err != nil {
			t.Fatal(err)
		}
		return d
	}
	drop := func(name string) func(safetensors.Tensor) (safetensors.Tensor, bool) {
		return func(x safetensors.Tensor) (safetensors.Tensor, bool) { return x, x.Name != name }
	}
	set := func(name string, v []float32, shape []int) func(safetensors.Tensor) (safetensors.Tensor, bool) {
		return func(x safetensors.Tensor) (safetensors.Tensor, bool) {
			if x.Name == name {
				return safetensors.FromFloat32(name, shape, v), true
			}
			return x, true
		}
	}
	bias := make([]float32, 40)
	bias[7] = 0.5
	for _, c := range []struct {
		name, old, new, want string
		edit                 func(safetensors.Tensor) (safetensors.Tensor, bool)
	}{
		{"renormalised gates", `"norm_topk_prob": false`, `"norm_topk_prob": true`, "norm_topk_prob=true: Trellis's softmax router gates by the chosen experts' probabilities without renormalising", nil},
		{"shared expert", `"shared_expert_intermediate_size": 0,`, `"shared_expert_intermediate_size": 16,`, "shared_expert_intermediate_size=16: Qwen2-MoE's shared expert is gated by sigmoid", nil},
		{"shared expert by default", `"shared_expert_intermediate_size": 0,`, ``, "shared_expert_intermediate_size=5632", nil},
		{"sparse layers", `"decoder_sparse_step": 2,
  "mlp_only_layers": []`, `"decoder_sparse_step": 1, "mlp_only_layers": [0, 2]`, "mlp_only_layers=[0 2], decoder_sparse_step=1: the sparse layers [1 3 4] are not Trellis's pattern", nil},
		{"sparse step", `"decoder_sparse_step": 2`, `"decoder_sparse_step": 0`, "decoder_sparse_step=0 must be positive", nil},
		{"no experts key", `"num_experts": 6,`, ``, "num_experts is missing", nil},
		{"sliding window", `"use_sliding_window": false`, `"use_sliding_window": true`, "use_sliding_window=true", nil},
		{"layer types", `"use_sliding_window": false`, `"use_sliding_window": false, "layer_types": ["full_attention", "sliding_attention"]`, `layer_types[1]="sliding_attention"`, nil},
		{"rope type", `"rope_theta": 1000,`, `"rope_theta": 1000, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000},`, `rope_parameters.rope_type="yarn"`, nil},
		{"attention bias", "", "", "tensor model.layers.2.self_attn.q_proj.bias is 0.5 at element 7: Trellis's Llama has no attention biases",
			set("model.layers.2.self_attn.q_proj.bias", bias, []int{40})},
		{"shared expert weights", "", "", "tensor model.layers.1.mlp.shared_expert.up_proj.weight has shape [1 40]",
			set("model.layers.1.mlp.shared_expert.up_proj.weight", make([]float32, 40), []int{1, 40})},
		{"missing expert", "", "", "missing tensor model.layers.3.mlp.experts.4.down_proj.weight", drop("model.layers.3.mlp.experts.4.down_proj.weight")},
		{"expert shape", "", "", "tensor model.layers.1.mlp.experts.0.gate_proj.weight has shape [24 39]",
			set("model.layers.1.mlp.experts.0.gate_proj.weight", make([]float32, 24*39), []int{24, 39})},
		{"unknown tensor", "", "", "tensor model.layers.1.mlp.experts.6.up_proj.weight is not part of a mixture-of-experts Llama (Qwen2MoeForCausalLM)",
			func(x safetensors.Tensor) (safetensors.Tensor, bool) {
				if x.Name == "model.layers.1.mlp.shared_expert_gate.weight" {
					x.Name = "model.layers.1.mlp.experts.6.up_proj.weight"
				}
				return x, true
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(with(t, c.old, c.new, c.edit))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
	// Without the zero biases and the empty shared expert (qkv_bias=false,
	// a loader that leaves empty tensors out) the model reads the same.
	js = []byte(strings.Replace(string(js), `"qkv_bias": true`, `"qkv_bias": false`, 1))
	d := with(t, "", "", func(x safetensors.Tensor) (safetensors.Tensor, bool) {
		return x, !strings.Contains(x.Name, "bias") && !strings.Contains(x.Name, "shared_expert")
	})
	if m, err := Read(d); err != nil || m.Config != cfg.Canonical() {
		t.Fatalf("without biases and shared expert: %v (%v)", m.Config, err)
	}
}

// TestMoEReadsFusedExperts: transformers 5 holds a Qwen2-MoE layer's
// experts as mlp.experts.gate_up_proj (E, 2F_e, C), each expert's rows
// [gate | up], and mlp.experts.down_proj (E, C, F_e) — Trellis's own
// stacks; a file with those names in place of the E per-expert matrices
// reads as the same weights.
func TestMoEReadsFusedExperts(t *testing.T) {
	cfg := tinyMoE()
	w := moeWeights(t, cfg)
	good := t.TempDir()
	if err := Write(good, Model{Config: cfg, W: w}, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(filepath.Join(good, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range f.Names() {
		if strings.Contains(n, ".mlp.experts.") {
			continue
		}
		info, _ := f.Info(n)
		b, _ := f.Bytes(n)
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: b})
	}
	for _, u := range cfg.Layout().Units {
		for _, x := range u.Tensors {
			if x.Expert {
				ts = append(ts, safetensors.FromFloat32(LlamaPrefix+x.Name, x.Shape, w[x.Offset:x.Offset+x.Size]))
			}
		}
	}
	dir := t.TempDir()
	if err := safetensors.WriteFile(filepath.Join(dir, WeightsFile), ts, nil); err != nil {
		t.Fatal(err)
	}
	js, _ := os.ReadFile(filepath.Join(good, ConfigFile))
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), js, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.W, w) {
		t.Fatal("the fused experts read as other weights")
	}
}
