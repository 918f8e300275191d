package data

import (
	"strings"
	"testing"
)

func TestNewTokenizerNames(t *testing.T) {
	cases := []struct {
		name, canon string
		vocab       int
	}{
		{"byte", ByteName, 256},
		{"gpt2", GPT2Name, 50257},
		{"r50k", GPT2Name, 50257},
		{"R50K_BASE", GPT2Name, 50257},
	}
	for _, tc := range cases {
		tok, err := NewTokenizer(tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tok.Name() != tc.canon || tok.VocabSize() != tc.vocab {
			t.Errorf("%s: got %s/%d, want %s/%d", tc.name, tok.Name(), tok.VocabSize(), tc.canon, tc.vocab)
		}
	}
	if _, err := NewTokenizer("cl100k"); err == nil || !strings.Contains(err.Error(), `tokenizer="cl100k"`) {
		t.Errorf("unknown tokenizer: err = %v", err)
	}
}

// TestGPT2KnownIDs holds the encoder to ids published for GPT-2 (e.g. by
// tiktoken and Hugging Face's GPT2TokenizerFast).
func TestGPT2KnownIDs(t *testing.T) {
	tok, err := NewTokenizer("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		text string
		ids  []int32
	}{
		{"Hello world", []int32{15496, 995}},
		{"hello world", []int32{31373, 995}},
		{" the", []int32{262}},
		{"It is a truth universally acknowledged", []int32{1026, 318, 257, 3872, 26208, 10810}},
		{"\n\n", []int32{628}},
	}
	for _, tc := range cases {
		got := tok.Encode(tc.text)
		if len(got) != len(tc.ids) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.ids)
			continue
		}
		for i := range got {
			if got[i] != tc.ids[i] {
				t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.ids)
				break
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	texts := []string{"", "a", "Mr. Darcy's \"pride\"—and 3,000 a-year!\n\n\tÉlizabeth ☃ 日本",
		"It is a truth universally acknowledged, that a single man in possession\nof a good fortune, must be in want of a wife."}
	for _, name := range []string{"byte", "gpt2"} {
		tok, err := NewTokenizer(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			ids := tok.Encode(s)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("%s: id %d outside [0,%d)", name, id, tok.VocabSize())
				}
			}
			if got := tok.Decode(ids); got != s {
				t.Errorf("%s: Decode(Encode(%q)) = %q", name, s, got)
			}
		}
	}
}

func TestDecodeSpecialAndUnknown(t *testing.T) {
	gpt, _ := NewTokenizer("gpt2")
	if got := gpt.Decode([]int32{15496, 50256, 995, 50300, -1}); got != "Hello<|endoftext|> world\uFFFD\uFFFD" {
		t.Errorf("gpt2 Decode = %q", got)
	}
	byt, _ := NewTokenizer("byte")
	if got := byt.Decode([]int32{104, 105, 256, -3}); got != "hi\uFFFD\uFFFD" {
		t.Errorf("byte Decode = %q", got)
	}
}

func TestByteTokenizerIsBytes(t *testing.T) {
	tok, _ := NewTokenizer("byte")
	s := "\x00\xffé"
	ids := tok.Encode(s)
	want := []int32{0, 255, 0xc3, 0xa9}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("Encode(%q) = %v, want %v", s, ids, want)
		}
	}
}
