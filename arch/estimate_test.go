package arch

import (
	"math"
	"strings"
	"testing"
)

// TestValidateOverflow: a parameter count beyond int64 is a validation
// error naming the fields, not a wrapped count that sizes a slice.
func TestValidateOverflow(t *testing.T) {
	for _, cfg := range []Config{
		{Layers: 1 << 62, Hidden: 256, Heads: 4, SeqLen: 128, Vocab: 256},
		{Layers: 4, Hidden: 1 << 32, Heads: 4, SeqLen: 128, Vocab: 256},
		{Layers: 4, Hidden: 256, Heads: 4, SeqLen: 128, Vocab: math.MaxInt64},
	} {
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "more parameters than a 64-bit count holds") || !strings.Contains(err.Error(), "layers=") {
			t.Errorf("%v: Validate() = %v", cfg, err)
		}
		if p := cfg.ParamCount(); !(p > 1e18) {
			t.Errorf("%v: ParamCount = %v", cfg, p)
		}
	}
}

func TestConfigString(t *testing.T) {
	got := Config{Layers: 1, Hidden: 32, Heads: 2, SeqLen: 16, Vocab: 256}.String()
	if want := "layers=1 hidden=32 heads=2 seq_len=16 vocab=256 dropout=0"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
