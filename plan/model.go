package plan

import (
	"fmt"
	"sort"
	"strings"
)

// Family is a decoder-only transformer family.
type Family string

// The families the planner models.
const (
	// GPT: LayerNorm (weight and bias), GELU MLP of width FFN, multi-head
	// attention, learned position embeddings, biases on every linear layer,
	// dropout after attention probabilities and on both residual branches.
	GPT Family = "gpt"
	// Llama: RMSNorm (weight only), SwiGLU MLP (gate, up, down) of width
	// FFN, grouped-query attention with KVHeads, rotary positions (no
	// position parameters), no biases, no dropout, untied output layer.
	Llama Family = "llama"
)

// Model describes a decoder-only transformer. The fields are the ones a
// Hugging Face config.json carries; everything the cost model needs follows
// from them.
type Model struct {
	Name    string
	Family  Family
	Layers  int // L
	Hidden  int // h
	Heads   int // a, attention (query) heads
	KVHeads int // key/value heads (= Heads for multi-head attention)
	HeadDim int // head size; Hidden/Heads when 0
	FFN     int // MLP inner width f (GPT: usually 4h)
	Vocab   int // V
	// MaxSeq is the number of learned position embeddings (GPT); for RoPE
	// models, and GPT models with RelPos, it only bounds the sequence length.
	MaxSeq int
	// RelPos: a GPT-family model whose positions are relative (rotary, as
	// GPT-NeoX, or ALiBi, as BLOOM) and so has no learned position table.
	RelPos bool
	// EmbedNorm: a LayerNorm right after the input embedding (BLOOM).
	EmbedNorm bool
	// Tied shares the input embedding with the output layer.
	Tied bool
	// AttnBias puts biases on q, k, v and the attention output; MLPBias on
	// the MLP's linear layers (GPT: both; Llama: neither by default).
	AttnBias bool
	MLPBias  bool
	// Dropout: dropout layers are present (their masks cost memory).
	Dropout bool

	// The families' extensions the models of 2024–26 use (moe.go). MoE:
	// routed experts (Experts = 0: dense); MLA: multi-head latent attention
	// (KVRank = 0: grouped-query attention).
	MoE *MoE
	MLA *MLA
	// QKNorm: an RMSNorm on every query and key head (Qwen3).
	QKNorm bool
	// Window: the sliding-window width of the layers that use one (GPT-OSS
	// alternates sliding and full layers, windowLayer); 0: none. Sinks: a
	// learned per-head softmax sink (GPT-OSS), a parameters a layer.
	Window int
	Sinks  bool
	// MTP: DeepSeek-V3's multi-token-prediction modules, costed on the
	// pipeline stage that holds the output layer (MTPParams).
	MTP int
}

// HD is the head size.
func (m Model) HD() int {
	if m.HeadDim > 0 {
		return m.HeadDim
	}
	return m.Hidden / m.Heads
}

// Validate names the first field that breaks a rule.
func (m Model) Validate() error {
	if m.Family != GPT && m.Family != Llama {
		return fmt.Errorf("plan: model %s: family %q: want gpt or llama", m.Name, m.Family)
	}
	pos := map[string]int{"layers": m.Layers, "hidden": m.Hidden, "heads": m.Heads,
		"kv_heads": m.KVHeads, "ffn": m.FFN, "vocab": m.Vocab}
	for _, k := range sortedKeys(pos) {
		if pos[k] < 1 {
			return fmt.Errorf("plan: model %s: %s=%d: must be at least 1", m.Name, k, pos[k])
		}
	}
	if m.HeadDim == 0 && m.Hidden%m.Heads != 0 {
		return fmt.Errorf("plan: model %s: heads=%d does not divide hidden=%d (give head_dim)", m.Name, m.Heads, m.Hidden)
	}
	if m.Heads%m.KVHeads != 0 {
		return fmt.Errorf("plan: model %s: kv_heads=%d does not divide heads=%d", m.Name, m.KVHeads, m.Heads)
	}
	if p := m.approxParams(); p > 1e16 {
		return fmt.Errorf("plan: model %s: %.3g parameters: more than the 1e16 the planner counts exactly", m.Name, p)
	}
	if m.learnedPositions() && m.MaxSeq < 1 {
		return fmt.Errorf("plan: model %s: max_seq=%d: a GPT model needs learned positions", m.Name, m.MaxSeq)
	}
	return m.validateGeneral()
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// approxParams is Params in float64, safe from overflow for any sizes.
func (m Model) approxParams() float64 {
	h, f, d := float64(m.Hidden), float64(m.FFN), float64(m.HD())
	layer := h*d*(2*float64(m.Heads)+2*float64(m.KVHeads)) + 3*h*f + 4*h + 2*f
	if e := m.experts(); e.Experts > 0 { // the experts, bounded before the exact count multiplies them
		layer += float64(e.Experts)*(3*h*float64(e.FFN)+2*float64(e.FFN)+h) + 3*h*float64(e.SharedFFN)
	}
	if a := m.latent(); a.KVRank > 0 {
		qk, r := float64(a.QKNope+a.QKRope), float64(a.QRank)
		layer += h*(r+float64(a.KVRank+a.QKRope)) + float64(m.Heads)*(qk*(r+h)+float64(a.KVRank)*(qk+float64(a.V))+float64(a.V)*h)
	}
	return float64(m.Layers+m.MTP)*layer + float64(m.Vocab)*h*2 + float64(m.MaxSeq)*h
}

// learnedPositions reports a learned position table (GPT without RelPos).
func (m Model) learnedPositions() bool { return m.Family == GPT && !m.RelPos }

// gated reports a gated (SwiGLU) MLP: two input projections of width FFN.
func (m Model) gated() bool { return m.Family == Llama }

// LayerMatrixParams counts the weights of one layer's linear layers (no
// biases, no norms): q (h·a·d), k and v (h·kv·d each), output (a·d·h), and
// the MLP (2·h·f for GELU, 3·h·f for SwiGLU). These are the parameters
// whose matrix products carry the FLOPs.
func (m Model) LayerMatrixParams() int64 {
	h, d := int64(m.Hidden), int64(m.HD())
	qo := 2 * h * int64(m.Heads) * d
	kv := 2 * h * int64(m.KVHeads) * d
	mlp := 2 * h * int64(m.FFN)
	if m.gated() {
		mlp = 3 * h * int64(m.FFN)
	}
	return qo + kv + mlp
}

// LayerParams counts every parameter of one transformer layer: the matrices,
// the biases and the two norms (LayerNorm: weight and bias; RMSNorm: weight).
func (m Model) LayerParams() int64 {
	h, d := int64(m.Hidden), int64(m.HD())
	qkvOut := (int64(m.Heads) + 2*int64(m.KVHeads)) * d
	n := m.LayerMatrixParams() + 2*m.normParams()
	if m.AttnBias { // q, k, v and the output projection
		n += qkvOut + h
	}
	if m.MLPBias { // fc1 (gate and up when gated) and fc2
		n += int64(m.FFN) + h
		if m.gated() {
			n += int64(m.FFN)
		}
	}
	return n
}

func (m Model) normParams() int64 {
	if m.Family == GPT {
		return 2 * int64(m.Hidden)
	}
	return int64(m.Hidden)
}

// EmbeddingParams counts the input embedding: V·h tokens, plus MaxSeq·h
// learned positions for GPT (unless RelPos), plus the embedding norm.
func (m Model) EmbeddingParams() int64 {
	n := int64(m.Vocab) * int64(m.Hidden)
	if m.learnedPositions() {
		n += int64(m.MaxSeq) * int64(m.Hidden)
	}
	if m.EmbedNorm {
		n += m.normParams()
	}
	return n
}

// HeadParams counts the final norm and, when untied, the output layer V·h.
func (m Model) HeadParams() int64 {
	n := m.normParams()
	if !m.Tied {
		n += int64(m.Vocab) * int64(m.Hidden)
	}
	return n
}

// Params is the exact parameter count:
//
//	P = E + L·P_layer + P_head
//
// e.g. Llama 3 8B: 2·128256·4096 + 32·218,112,000 + 4096 = 8,030,261,248.
//
// A model with experts or MLA (Model.general) sums its layers one by one
// (generalLayerParams): e.g. DeepSeek-V3 671,026,419,200.
func (m Model) Params() int64 {
	if m.general() {
		n := m.EmbeddingParams() + m.HeadParams()
		for i := 0; i < m.Layers; i++ {
			n += m.generalLayerParams(i)
		}
		return n
	}
	return m.EmbeddingParams() + int64(m.Layers)*m.LayerParams() + m.HeadParams()
}

// String is a one-line summary.
func (m Model) String() string {
	if m.moe() {
		e := m.experts()
		return fmt.Sprintf("%s (%s MoE, %s params, %s active: L=%d h=%d heads=%d kv=%d ffn=%d V=%d; experts=%d top-%d ffn=%d shared=%d dense_first=%d%s)",
			m.Name, m.Family, Count(float64(m.Params())), Count(float64(m.ActiveParams())), m.Layers, m.Hidden, m.Heads, m.KVHeads,
			m.FFN, m.Vocab, e.Experts, e.TopK, e.FFN, e.SharedFFN, e.DenseFirst, m.generalNote())
	}
	return fmt.Sprintf("%s (%s, %s params: L=%d h=%d heads=%d kv=%d ffn=%d V=%d)",
		m.Name, m.Family, Count(float64(m.Params())), m.Layers, m.Hidden, m.Heads, m.KVHeads, m.FFN, m.Vocab)
}

// generalNote names the attention variant and the MTP modules.
func (m Model) generalNote() string {
	s := ""
	if a := m.latent(); a.KVRank > 0 {
		s += fmt.Sprintf("; MLA q_rank=%d kv_rank=%d d=%d+%d/%d", a.QRank, a.KVRank, a.QKNope, a.QKRope, a.V)
	}
	if m.Window > 0 {
		s += fmt.Sprintf("; window %d on alternate layers", m.Window)
	}
	if m.MTP > 0 {
		s += fmt.Sprintf("; %d MTP (%s params)", m.MTP, Count(float64(m.MTPParams())))
	}
	return s
}

// gptModel builds a GPT-family model with FFN = 4h.
func gptModel(name string, layers, hidden, heads, vocab, maxSeq int, tied bool) Model {
	return Model{Name: name, Family: GPT, Layers: layers, Hidden: hidden, Heads: heads, KVHeads: heads,
		FFN: 4 * hidden, Vocab: vocab, MaxSeq: maxSeq, Tied: tied, AttnBias: true, MLPBias: true, Dropout: true}
}

func llamaModel(name string, layers, hidden, heads, kv, ffn int) Model {
	return Model{Name: name, Family: Llama, Layers: layers, Hidden: hidden, Heads: heads, KVHeads: kv,
		FFN: ffn, Vocab: 128256, MaxSeq: 131072}
}

// modelPresets lists the built-in models. The Megatron models are the GPT
// configurations of Narayanan et al. 2021 (Table 1) and Korthikanti et al.
// 2022 (Table 3): vocabulary 51,200 (GPT-2's 50,257 padded), sequence 2048.
// The rest are the published large runs docs/PLANNER.md validates against
// (heldOutPresets).
func modelPresets() []Model {
	const mv, ms = 51200, 2048
	ps := []Model{
		gptModel("gpt2", 12, 768, 12, 50257, 1024, true),
		gptModel("gpt2-medium", 24, 1024, 16, 50257, 1024, true),
		gptModel("gpt2-large", 36, 1280, 20, 50257, 1024, true),
		gptModel("gpt2-xl", 48, 1600, 25, 50257, 1024, true),
		gptModel("gpt3-175b", 96, 12288, 96, 50257, 2048, true),
		llamaModel("llama3-8b", 32, 4096, 32, 8, 14336),
		llamaModel("llama3-70b", 80, 8192, 64, 8, 28672),
		llamaModel("llama3-405b", 126, 16384, 128, 8, 53248),
		gptModel("megatron-1.7b", 24, 2304, 24, mv, ms, true),
		gptModel("megatron-3.6b", 30, 3072, 32, mv, ms, true),
		gptModel("megatron-7.5b", 36, 4096, 32, mv, ms, true),
		gptModel("megatron-18.4b", 40, 6144, 48, mv, ms, true),
		gptModel("megatron-22b", 48, 6144, 64, mv, ms, true),
		gptModel("megatron-39.1b", 48, 8192, 64, mv, ms, true),
		gptModel("megatron-76.1b", 60, 10240, 80, mv, ms, true),
		gptModel("megatron-145.6b", 80, 12288, 96, mv, ms, true),
		gptModel("megatron-175b", 96, 12288, 96, mv, ms, true),
		gptModel("megatron-310.1b", 96, 16384, 128, mv, ms, true),
		gptModel("megatron-530b", 105, 20480, 128, mv, ms, true),
		gptModel("megatron-1t", 128, 25600, 160, mv, ms, true),
	}
	ps = append(ps, heldOutPresets()...)
	return append(ps, moePresets()...)
}

// ModelPreset returns a built-in model by name.
func ModelPreset(name string) (Model, error) {
	var names []string
	for _, m := range modelPresets() {
		if m.Name == name {
			return m, nil
		}
		names = append(names, m.Name)
	}
	return Model{}, fmt.Errorf("plan: no model preset %q (have %s)", name, strings.Join(names, ", "))
}

// ModelPresetNames lists the built-in models.
func ModelPresetNames() []string {
	var names []string
	for _, m := range modelPresets() {
		names = append(names, m.Name)
	}
	return names
}
