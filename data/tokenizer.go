package data

import (
	"fmt"
	"strings"

	// Only the codec package, and only its r50k constructor, is used: the
	// tokenizer package's Get references every codec and would link all
	// five vocabularies (about 9.6 MB more binary).
	"github.com/tiktoken-go/tokenizer/codec"
)

// Tokenizer turns text into token ids and back.
type Tokenizer interface {
	// Encode returns the token ids of s.
	Encode(s string) []int32
	// Decode concatenates the text of ids. Ids without text (outside the
	// vocabulary, e.g. in a model's padded vocabulary) decode to U+FFFD.
	// Decoding is byte-exact, so a multi-byte character split across two
	// calls comes out as two invalid halves; decode whole sequences.
	Decode(ids []int32) string
	// VocabSize is one more than the largest id Encode can return.
	VocabSize() int
	// Name is the canonical name ("byte" or "gpt2").
	Name() string
}

// Tokenizer names and vocabulary sizes.
const (
	ByteName      = "byte"
	GPT2Name      = "gpt2"
	ByteVocabSize = 256
	GPT2VocabSize = 50257 // 50,000 merges + 256 bytes + <|endoftext|>
	gpt2EOT       = 50256
	gpt2EOTText   = "<|endoftext|>"
	replacement   = "\uFFFD"
)

// canonicalTokenizer maps accepted names to canonical ones and vocabulary
// sizes, without building a tokenizer.
func canonicalTokenizer(name string) (string, int, error) {
	switch strings.ToLower(name) {
	case "byte", "bytes":
		return ByteName, ByteVocabSize, nil
	case "gpt2", "gpt-2", "r50k", "r50k_base":
		return GPT2Name, GPT2VocabSize, nil
	}
	return "", 0, fmt.Errorf("data: tokenizer=%q: want byte or gpt2 (r50k)", name)
}

// NewTokenizer returns the tokenizer called name: "byte" (one token per byte,
// vocabulary 256) or "gpt2" / "r50k" (GPT-2's byte-level BPE, the r50k_base
// encoding, vocabulary 50257).
func NewTokenizer(name string) (Tokenizer, error) {
	canon, _, err := canonicalTokenizer(name)
	if err != nil {
		return nil, err
	}
	if canon == ByteName {
		return byteTokenizer{}, nil
	}
	return gpt2Tokenizer{c: codec.NewR50kBase()}, nil
}

// byteTokenizer maps each byte to its value.
type byteTokenizer struct{}

func (byteTokenizer) Encode(s string) []int32 {
	ids := make([]int32, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = int32(s[i])
	}
	return ids
}

func (byteTokenizer) Decode(ids []int32) string {
	var sb strings.Builder
	sb.Grow(len(ids))
	for _, id := range ids {
		if id < 0 || id >= ByteVocabSize {
			sb.WriteString(replacement)
			continue
		}
		sb.WriteByte(byte(id))
	}
	return sb.String()
}

func (byteTokenizer) VocabSize() int { return ByteVocabSize }
func (byteTokenizer) Name() string   { return ByteName }

// gpt2Tokenizer is GPT-2's BPE through tiktoken-go's r50k codec. Special
// tokens are not recognised in Encode's input (the text "<|endoftext|>" is
// encoded as ordinary text); Decode renders id 50256 as "<|endoftext|>".
type gpt2Tokenizer struct {
	c *codec.Codec
}

func (t gpt2Tokenizer) Encode(s string) []int32 {
	ids, _, err := t.c.Encode(s)
	if err != nil {
		// The codec fails only if its split regexp times out, which it
		// never does without a timeout set: a programming error.
		panic(fmt.Sprintf("data: gpt2 encode: %v", err))
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// Decode decodes runs of ordinary tokens through the codec and renders the
// end-of-text token and unknown ids itself.
func (t gpt2Tokenizer) Decode(ids []int32) string {
	var sb strings.Builder
	run := make([]uint, 0, len(ids))
	flush := func() {
		if len(run) == 0 {
			return
		}
		s, err := t.c.Decode(run)
		if err != nil { // unreachable: run holds only ids below gpt2EOT
			panic(fmt.Sprintf("data: gpt2 decode: %v", err))
		}
		sb.WriteString(s)
		run = run[:0]
	}
	for _, id := range ids {
		switch {
		case id >= 0 && id < gpt2EOT:
			run = append(run, uint(id))
			continue
		case id == gpt2EOT:
			flush()
			sb.WriteString(gpt2EOTText)
		default:
			flush()
			sb.WriteString(replacement)
		}
	}
	flush()
	return sb.String()
}

func (gpt2Tokenizer) VocabSize() int { return GPT2VocabSize }
func (gpt2Tokenizer) Name() string   { return GPT2Name }
