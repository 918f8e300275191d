package data

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	txt := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(txt, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"default", func(*Config) {}, ""},
		{"synthetic", func(c *Config) { c.Source = "synthetic" }, ""},
		{"text", func(c *Config) { c.Source = txt; c.Tokenizer = "gpt2" }, ""},
		{"empty", func(c *Config) { c.Source = "" }, "source is empty"},
		{"missing", func(c *Config) { c.Source = filepath.Join(dir, "nope.bin") }, "nope.bin: no such file"},
		{"directory", func(c *Config) { c.Source = dir }, "is a directory"},
		{"tokenizer", func(c *Config) { c.Tokenizer = "llama" }, `tokenizer="llama"`},
		{"val-high", func(c *Config) { c.ValFraction = 0.6 }, "val_fraction=0.6"},
		{"val-nan", func(c *Config) { c.ValFraction = math.NaN() }, "val_fraction=NaN"},
		{"synthetic-tokens", func(c *Config) { c.SyntheticTokens = -1 }, "synthetic_tokens=-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line containing %q", err, tc.want)
			}
		})
	}
}

func TestCheckVocab(t *testing.T) {
	cases := []struct {
		source, tok string
		vocab       int
		want        string
	}{
		{"embedded", "byte", 256, ""},
		{"embedded", "byte", 512, ""},
		{"embedded", "byte", 255, "tokenizer byte has 256 tokens but model vocab=255"},
		{"embedded", "gpt2", 50304, ""},
		{"embedded", "gpt2", 512, "set model vocab >= 50257 (e.g. 50304"},
		{"synthetic", "gpt2", 512, ""},
		{"synthetic", "byte", 0, "vocab=0"},
	}
	for _, tc := range cases {
		err := Config{Source: tc.source, Tokenizer: tc.tok}.CheckVocab(tc.vocab)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s/%s/V=%d: err = %v, want %q", tc.source, tc.tok, tc.vocab, err, tc.want)
		}
	}
}

func TestEmbeddedCorpus(t *testing.T) {
	text, err := EmbeddedText()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(text))
	if got := hex.EncodeToString(sum[:]); got != "dfc684d4f857fa938268f9ab9c5567b64bd0691251eca959644adeabe6287a4d" {
		t.Fatalf("embedded corpus sha256 %s (len %d): it no longer matches data/corpus/README.md", got, len(text))
	}
	if !strings.HasPrefix(text, "PRIDE AND PREJUDICE") || !strings.Contains(text, "It is a truth universally acknowledged") {
		t.Fatal("embedded corpus is not Pride and Prejudice")
	}
}

func TestSynthetic(t *testing.T) {
	const V = 1000
	mk := func(seed uint64) *Loader {
		l, err := NewLoader(LoaderConfig{Data: Config{Source: "synthetic", Tokenizer: "byte", ValFraction: 0.1, SyntheticTokens: 200_000},
			SeqLen: 100, Vocab: V, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b, c := mk(1), mk(1), mk(2)
	ia, ta := make([]int32, 100*100), make([]int32, 100*100)
	ib, tb := make([]int32, 100*100), make([]int32, 100*100)
	ic, tc := make([]int32, 100*100), make([]int32, 100*100)
	for _, x := range []error{a.Batch(0, 100, ia, ta), b.Batch(0, 100, ib, tb), c.Batch(0, 100, ic, tc)} {
		if x != nil {
			t.Fatal(x)
		}
	}
	counts := make([]int, V)
	diff := 0
	for i := range ia {
		if ia[i] != ib[i] || ta[i] != tb[i] {
			t.Fatal("synthetic data differs for one seed")
		}
		if ia[i] != ic[i] {
			diff++
		}
		if ia[i] < 0 || ia[i] >= V {
			t.Fatalf("token %d outside [0,%d)", ia[i], V)
		}
		counts[ia[i]]++
	}
	if diff < len(ia)*9/10 {
		t.Fatalf("seeds 1 and 2 agree on %d of %d tokens", len(ia)-diff, len(ia))
	}
	// 10,000 draws over 1,000 values: each count is about Poisson(10).
	for v, n := range counts {
		if n > 40 {
			t.Fatalf("token %d drawn %d times of %d: not uniform", v, n, len(ia))
		}
	}
}

func TestTokenFileSource(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "toks.bin")
	toks := make([]uint16, 1000)
	for i := range toks {
		toks[i] = uint16(i % 300)
	}
	if err := WriteTokenFile(p, toks); err != nil {
		t.Fatal(err)
	}
	cfg := LoaderConfig{Data: Config{Source: p, Tokenizer: "byte", ValFraction: 0.1}, SeqLen: 10, Vocab: 512}
	l, err := NewLoader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if l.TrainTokens() != 900 {
		t.Fatalf("train tokens %d, want 900", l.TrainTokens())
	}
	cfg.Vocab = 299 // byte tokenizer fits, but the file holds token 299
	cfg.Data.Tokenizer = "byte"
	if _, err := NewLoader(cfg); err == nil || !strings.Contains(err.Error(), "token 299 at index 299 is outside the model vocab=299") {
		t.Fatalf("err = %v", err)
	}
}
