package data

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Source kinds.
const (
	SourceEmbedded  = "embedded"  // the corpus compiled into the binary
	SourceSynthetic = "synthetic" // uniform random tokens of the model's vocabulary
)

// Config is the [data] section of a job file.
type Config struct {
	// Source is "embedded", "synthetic", or a file path: a path ending in
	// .bin is an llm.c token file (uint16 tokens, header magic 20240520);
	// any other path is UTF-8 text, tokenised with Tokenizer.
	Source string `toml:"source"`
	// Tokenizer is "byte" (vocabulary 256) or "gpt2" (alias "r50k",
	// vocabulary 50257). For a token file or synthetic data it only decodes
	// samples.
	Tokenizer string `toml:"tokenizer"`
	// ValFraction is the fraction of the tokens, taken from the END of the
	// source, held out for validation: train = the first ⌊(1−f)·n⌉ tokens,
	// validation = the rest. 0 means no validation split.
	ValFraction float64 `toml:"val_fraction"`
	// CacheDir keeps tokenised text files (as llm.c token files named by a
	// hash of the content and the tokenizer). "" is the user cache directory
	// ($XDG_CACHE_HOME/trellis/tokens, usually ~/.cache/trellis/tokens);
	// "off" disables the cache.
	CacheDir string `toml:"cache_dir"`
	// SyntheticTokens is the length of the synthetic token stream (both
	// splits together); 0 means 1<<24.
	SyntheticTokens int64 `toml:"synthetic_tokens"`
}

// DefaultConfig is the embedded corpus with the byte tokenizer (a small
// vocabulary, so a small model learns English-like text in minutes) and the
// last 10% of tokens for validation.
func DefaultConfig() Config {
	return Config{Source: SourceEmbedded, Tokenizer: ByteName, ValFraction: 0.1}
}

// defaultSyntheticTokens is the synthetic stream's length when unset.
const defaultSyntheticTokens = 1 << 24

// kind classifies the source.
func (c Config) kind() string {
	switch {
	case c.Source == SourceEmbedded || c.Source == SourceSynthetic:
		return c.Source
	case strings.EqualFold(filepath.Ext(c.Source), ".bin"):
		return "tokens"
	}
	return "text"
}

// Validate checks every field and that a source file exists, naming the
// field or the file.
func (c Config) Validate() error {
	if c.Source == "" {
		return fmt.Errorf("data: source is empty: want embedded, synthetic or a file path")
	}
	if _, _, err := canonicalTokenizer(c.Tokenizer); err != nil {
		return err
	}
	if !(c.ValFraction >= 0 && c.ValFraction <= 0.5) {
		return fmt.Errorf("data: val_fraction=%g must be in [0, 0.5]", c.ValFraction)
	}
	if c.SyntheticTokens < 0 {
		return fmt.Errorf("data: synthetic_tokens=%d must be >= 0", c.SyntheticTokens)
	}
	if k := c.kind(); k == "tokens" || k == "text" {
		st, err := os.Stat(c.Source)
		if err != nil {
			return fmt.Errorf("data: source: %w", err)
		}
		if st.IsDir() {
			return fmt.Errorf("data: source %s is a directory, want a .txt or .bin file", c.Source)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("data: source %s is not a regular file (%s), want a .txt or .bin file", c.Source, fileKind(st.Mode()))
		}
		if k == "text" && st.Size() > MaxTextBytes {
			return fmt.Errorf("data: source %s is %d bytes, more than the %d (1 GiB) a text source may have: tokenising it would hold several times that in memory; convert it to an llm.c token file (.bin) or split it",
				c.Source, st.Size(), int64(MaxTextBytes))
		}
	}
	return nil
}

// CheckVocab checks that the model's vocabulary (V) can embed every token
// the source yields: the tokenizer's vocabulary must not exceed V. Synthetic
// data draws from the model's vocabulary and always fits. Token files are
// checked token by token when loaded.
func (c Config) CheckVocab(modelVocab int) error {
	if modelVocab < 1 {
		return fmt.Errorf("data: model vocab=%d must be >= 1", modelVocab)
	}
	if c.kind() == SourceSynthetic {
		return nil
	}
	name, v, err := canonicalTokenizer(c.Tokenizer)
	if err != nil {
		return err
	}
	if v > modelVocab {
		return fmt.Errorf("data: tokenizer %s has %d tokens but model vocab=%d; set model vocab >= %d (e.g. %d, a multiple of 64)",
			name, v, modelVocab, v, (v+63)/64*64)
	}
	return nil
}

// MaxTextBytes bounds a text source: it is read whole and tokenised in
// memory (about 8 bytes per byte with the byte tokenizer: the text, its
// int32 ids and their uint16 copy).
const MaxTextBytes = 1 << 30

// fileKind names what a non-regular file is, for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}
