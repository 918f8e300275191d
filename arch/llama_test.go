package arch

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// llama3 is Llama 3 8B.
var llama3 = Config{Arch: Llama, Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, FFN: 14336, SeqLen: 8192, Vocab: 128256, RopeTheta: 500000}

// NumParams, Layout and the planner's count agree on Llama 3 8B's
// published 8,030,261,248 (untied), and a tied Llama counts its embedding
// once.
func TestLlamaParamCount(t *testing.T) {
	if got := llama3.NumParams(); got != 8_030_261_248 {
		t.Errorf("Llama 3 8B: NumParams %d, want 8,030,261,248", got)
	}
	small := Config{Arch: Llama, Layers: 3, Hidden: 48, Heads: 6, KVHeads: 2, FFN: 40, SeqLen: 12, Vocab: 259}
	// embed V·C, per layer 2C + C·(6+4)·8 + 6·8·C + 3·C·F, the norm C, the head V·C
	want := 259*48 + 3*(2*48+48*80+48*48+3*48*40) + 48 + 259*48
	for _, tied := range []bool{false, true} {
		c := small
		c.TieEmbeddings = tied
		w := want
		if tied {
			w -= 259 * 48
		}
		if got, lay := c.NumParams(), c.Layout(); got != w || lay.Size != w || c.ParamCount() != float64(w) {
			t.Errorf("tied=%v: NumParams %d, layout %d, ParamCount %v, want %d", tied, got, lay.Size, c.ParamCount(), w)
		}
		lay := c.Layout()
		if n := len(lay.Units); n != c.Layers+2 {
			t.Fatalf("%d units", n)
		}
		head := lay.Units[c.Layers+1]
		if names := []string{head.Tensors[0].Name}; head.Name != "head" || names[0] != "norm.weight" || (len(head.Tensors) == 2) == tied {
			t.Errorf("tied=%v: head unit %+v", tied, head)
		}
	}
	if f := (Config{Arch: Llama, Hidden: 256}).FFNWidth(); f != 768 {
		t.Errorf("the default SwiGLU width of hidden 256 is %d, want Llama's rule 768", f)
	}
	// Model FLOPs: the untied embedding (a lookup) is not counted, its head is.
	c := small
	n := float64(c.NumParams() - 259*48)
	if got, want := c.FLOPsPerToken(), 6*n+12*3*12*48; got != want {
		t.Errorf("FLOPsPerToken %v, want %v", got, want)
	}
}

// The Llama keys are validated by name and rule, and refused on GPT-2.
func TestLlamaValidate(t *testing.T) {
	good := Config{Arch: Llama, Layers: 2, Hidden: 64, Heads: 8, KVHeads: 2, FFN: 96, SeqLen: 16, Vocab: 100}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"valid", func(*Config) {}, ""},
		{"mha by default", func(c *Config) { c.KVHeads = 0 }, ""},
		{"mqa", func(c *Config) { c.KVHeads = 1 }, ""},
		{"kv heads", func(c *Config) { c.KVHeads = 3 }, "model.kv_heads=3 does not divide model.heads=8"},
		{"negative kv", func(c *Config) { c.KVHeads = -1 }, "model.kv_heads=-1 must be positive"},
		{"ffn", func(c *Config) { c.FFN = -4 }, "model.ffn_hidden=-4 must be positive"},
		{"odd head", func(c *Config) { c.Hidden, c.Heads, c.KVHeads = 24, 8, 2 }, "model.hidden/model.heads=3 must be even"},
		{"theta", func(c *Config) { c.RopeTheta = 0.5 }, "model.rope_theta=0.5 must be above 1"},
		{"eps", func(c *Config) { c.NormEps = 2 }, "model.norm_eps=2 must be in [0, 1)"},
		{"arch", func(c *Config) { c.Arch = "mamba" }, `model.arch="mamba": want gpt2 or llama`},
		{"gpt2 kv", func(c *Config) { c.Arch = GPT2 }, "model.kv_heads=2: arch=gpt2 has one key/value head per head"},
		{"gpt2 ffn", func(c *Config) { c.Arch, c.KVHeads = "", 0 }, "model.ffn_hidden=96: arch=gpt2's MLP is 4·model.hidden=256 wide"},
		{"gpt2 theta", func(c *Config) { c.Arch, c.KVHeads, c.FFN, c.RopeTheta = "", 0, 0, 1e4 }, "model.rope_theta=10000: arch=gpt2 has learned positions"},
	} {
		cfg := good
		c.edit(&cfg)
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	// Tensor parallelism splits the key/value heads and the SwiGLU width.
	for _, c := range []struct {
		tp   int
		want string
	}{{2, ""}, {4, "tp=4 does not divide model.kv_heads=2: tensor parallelism splits the key/value heads"}, {8, "tp=8 does not divide model.kv_heads=2"}} {
		err := Part{TP: c.tp}.Validate(good)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("tp=%d: %v, want %q", c.tp, err, c.want)
		}
	}
	if err := (Part{TP: 3}).Validate(Config{Arch: Llama, Layers: 1, Hidden: 36, Heads: 6, KVHeads: 3, FFN: 40, SeqLen: 3, Vocab: 9}); err == nil || !strings.Contains(err.Error(), "tp=3 does not divide the SwiGLU width model.ffn_hidden=40") {
		t.Errorf("tp=3 of ffn 40: %v", err)
	}
}

// Under tp the rank's q, k, v rows (and gate, up rows) lie back to back,
// so that one GEMM computes [q | k | v] (and [gate | up]): rank r holds
// query heads [r·NH/t, (r+1)·NH/t) and key/value heads [r·NKV/t, ...),
// the groups of its query heads; o_proj and down_proj split by columns;
// the untied head is vocab-parallel with padding, the norms replicated.
func TestLlamaPartLayout(t *testing.T) {
	c := Config{Arch: Llama, Layers: 2, Hidden: 48, Heads: 6, KVHeads: 2, FFN: 40, SeqLen: 12, Vocab: 259}
	HS := 8
	for r := range 2 {
		lay := c.PartLayout(Part{TP: 2, Rank: r})
		blk := lay.Units[1]
		names := make([]string, len(blk.Tensors))
		for i, tn := range blk.Tensors {
			names[i] = strings.TrimPrefix(tn.Name, "layers.0.")
		}
		if want := []string{"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
			"self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}; !slices.Equal(names, want) {
			t.Fatalf("block tensors %v", names)
		}
		q, k, v := blk.Tensors[1], blk.Tensors[2], blk.Tensors[3]
		if q.Shape[0] != 3*HS || k.Shape[0] != HS || k.Offset != q.Offset+q.Size || v.Offset != k.Offset+k.Size {
			t.Errorf("rank %d: q %v@%d, k %v@%d, v %v@%d: not one (5·HS, C) matrix", r, q.Shape, q.Offset, k.Shape, k.Offset, v.Shape, v.Offset)
		}
		if q.Global.Off[0] != r*3*HS || k.Global.Off[0] != r*HS {
			t.Errorf("rank %d: q rows from %d, k rows from %d", r, q.Global.Off[0], k.Global.Off[0])
		}
		g, u, o, d := blk.Tensors[6], blk.Tensors[7], blk.Tensors[4], blk.Tensors[8]
		if g.Shape[0] != 20 || u.Offset != g.Offset+g.Size || !reflect.DeepEqual(o.Shape, []int{48, 24}) || !reflect.DeepEqual(d.Shape, []int{48, 20}) {
			t.Errorf("rank %d: gate %v, up @%d, o %v, down %v", r, g.Shape, u.Offset, o.Shape, d.Shape)
		}
		if !blk.Tensors[0].Replicated || !blk.Tensors[5].Replicated {
			t.Errorf("rank %d: norms not replicated", r)
		}
		head := lay.Units[3].Tensors[1]
		if head.Name != "lm_head.weight" || head.Shape[0] != 130 || head.Valid() != (min(259, 130*(r+1))-130*r)*48 {
			t.Errorf("rank %d: lm_head %+v", r, head)
		}
	}
	if got, want := c.LargestUnit(Part{TP: 2}), float64(130*48+48); got != want {
		t.Errorf("LargestUnit %v, want %v (the untied head)", got, want)
	}
}

// The untied head asks for no unit 0 at the top of the model.
func TestLlamaWeightOrder(t *testing.T) {
	c := Config{Arch: Llama, Layers: 2, Hidden: 8, Heads: 2, SeqLen: 4, Vocab: 7}
	f, b := c.WeightOrder()
	if !slices.Equal(f, []int{0, 1, 2, 3}) || !slices.Equal(b, []int{3, 2, 1}) {
		t.Errorf("untied: forward %v, backward %v", f, b)
	}
	c.TieEmbeddings = true
	f, b = c.WeightOrder()
	if !slices.Equal(f, []int{0, 1, 2, 3, 0}) || !slices.Equal(b, []int{0, 3, 2, 1}) {
		t.Errorf("tied: forward %v, backward %v", f, b)
	}
}

// A Llama block's saved activations, by declaration, per token and layer
// at t = 1 in fp32: 3C + 2 norms' (two outputs and rstds, the residual
// between the branches), qkv (C + 2·KV·HS), the attention output C,
// SwiGLU's 3F, and the probabilities; selective recomputation shares
// those, full keeps one block.
func TestLlamaBlockSaved(t *testing.T) {
	c := Config{Arch: Llama, Layers: 4, Hidden: 48, Heads: 6, KVHeads: 2, FFN: 40, SeqLen: 12, Vocab: 259}
	d := Dims{B: 2, T: 12}
	BT := 24.0
	perTok := 3*48 + 2 + (48 + 2*16) + 48 + 3*40
	probs := 2.0 * 6 * 12 * 12
	if got := Sum(c.BlockSaved(d), false).F32; got != BT*float64(perTok)+probs {
		t.Errorf("block %v, want %v", got, BT*float64(perTok)+probs)
	}
	d.Recompute = RecomputeSelective
	if got, want := c.BlocksElems(d, 4, false).F32, 4*BT*float64(perTok)+probs; got != want {
		t.Errorf("selective: %v, want %v", got, want)
	}
	half := c.BlocksElems(Dims{B: 2, T: 12}, 1, true)
	if half.Half != BT*float64(3*48+48+2*16+48+3*40-48) || half.F32 != BT*(48+2)+probs {
		t.Errorf("16-bit: %+v", half)
	}
}
