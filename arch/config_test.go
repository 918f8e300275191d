package arch

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	good := Config{Layers: 4, Hidden: 256, Heads: 4, SeqLen: 256, Vocab: 512}
	cases := []struct {
		name string
		edit func(*Config)
		want string // substring of the error; "" for valid
	}{
		{"valid", func(*Config) {}, ""},
		{"dropout ok", func(c *Config) { c.Dropout = 0.1 }, ""},
		{"heads do not divide", func(c *Config) { c.Heads = 3 }, "model.heads=3 does not divide model.hidden=256"},
		{"zero layers", func(c *Config) { c.Layers = 0 }, "model.layers=0 must be positive"},
		{"negative hidden", func(c *Config) { c.Hidden = -8 }, "model.hidden=-8 must be positive"},
		{"zero heads", func(c *Config) { c.Heads = 0 }, "model.heads=0 must be positive"},
		{"zero seq_len", func(c *Config) { c.SeqLen = 0 }, "model.seq_len=0 must be positive"},
		{"zero vocab", func(c *Config) { c.Vocab = 0 }, "model.vocab=0 must be positive"},
		{"dropout 1", func(c *Config) { c.Dropout = 1 }, "model.dropout=1 must be in [0, 1)"},
		{"dropout negative", func(c *Config) { c.Dropout = -0.1 }, "model.dropout=-0.1 must be in [0, 1)"},
	}
	for _, c := range cases {
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
}

func TestParamCountAndLayout(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want int
	}{
		{"gpt2-124M", Config{Layers: 12, Hidden: 768, Heads: 12, SeqLen: 1024, Vocab: 50257}, 124_439_808},
		{"gpt2-350M", Config{Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 1024, Vocab: 50257}, 354_823_168},
		{"reference", Config{Layers: 4, Hidden: 256, Heads: 4, SeqLen: 256, Vocab: 512}, 4*(12*256*256+13*256) + 512*256 + 256*256 + 512},
	}
	for _, c := range cases {
		if got := c.cfg.NumParams(); got != c.want {
			t.Errorf("%s: NumParams = %d, want %d", c.name, got, c.want)
		}
		lay := c.cfg.Layout()
		if lay.Size != c.want {
			t.Errorf("%s: Layout size %d, want %d", c.name, lay.Size, c.want)
		}
		if len(lay.Units) != c.cfg.Layers+2 {
			t.Fatalf("%s: %d units, want L+2 = %d", c.name, len(lay.Units), c.cfg.Layers+2)
		}
		off := 0
		for ui, u := range lay.Units {
			if u.Offset != off {
				t.Errorf("%s: unit %d at %d, want %d", c.name, ui, u.Offset, off)
			}
			for _, tn := range u.Tensors {
				n := 1
				for _, d := range tn.Shape {
					n *= d
				}
				if tn.Offset != off || tn.Size != n {
					t.Errorf("%s: tensor %s at %d size %d, want %d size %d", c.name, tn.Name, tn.Offset, tn.Size, off, n)
				}
				off += tn.Size
			}
			if u.Size != off-u.Offset {
				t.Errorf("%s: unit %d size %d, want %d", c.name, ui, u.Size, off-u.Offset)
			}
		}
		if u := lay.Units[1]; u.Size != blockParams(c.cfg.Hidden) || u.Name != "h.0" {
			t.Errorf("%s: block unit %q size %d, want h.0 size %d", c.name, u.Name, u.Size, blockParams(c.cfg.Hidden))
		}
	}
	lay := Config{Layers: 2, Hidden: 8, Heads: 2, SeqLen: 4, Vocab: 10}.Layout()
	names := map[string][]int{"wte": {10, 8}, "wpe": {4, 8}, "h.1.attn.c_attn.weight": {24, 8}, "h.0.mlp.c_proj.weight": {8, 32}, "ln_f.bias": {8}}
	for name, shape := range names {
		tn, ok := lay.Tensor(name)
		if !ok || len(tn.Shape) != len(shape) || tn.Shape[0] != shape[0] || tn.Shape[len(shape)-1] != shape[len(shape)-1] {
			t.Errorf("tensor %s: %+v (found %v), want shape %v", name, tn, ok, shape)
		}
	}
}

func TestFLOPsPerToken(t *testing.T) {
	c := Config{Layers: 12, Hidden: 768, Heads: 12, SeqLen: 1024, Vocab: 50257}
	want := 6*124_439_808.0 + 12*12*1024*768
	if got := c.FLOPsPerToken(); got != want {
		t.Errorf("FLOPsPerToken = %v, want %v", got, want)
	}
}
