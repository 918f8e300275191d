package data

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTextCache(t *testing.T) {
	dir, cdir := t.TempDir(), t.TempDir()
	txt := filepath.Join(dir, "book.txt")
	text := strings.Repeat("It is a truth universally acknowledged, that a single man. ", 20)
	if err := os.WriteFile(txt, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cache := textCache{dir: cdir, log: slog.New(slog.NewTextHandler(&logs, nil))}
	tok, _ := NewTokenizer("gpt2")
	want := tok.Encode(text)

	load := func() []int32 {
		t.Helper()
		st, err := loadText(txt, tok, cache)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]int32, st.Len())
		st.Read(got, 0)
		return got
	}

	// First load tokenises and writes exactly one cache file.
	if got := load(); !slices.Equal(got, want) {
		t.Fatal("first load differs from Encode")
	}
	files := cacheFiles(t, cdir)
	if len(files) != 1 || !strings.Contains(filepath.Base(files[0]), "book.gpt2.") {
		t.Fatalf("cache files %v", files)
	}

	// Second load reads the cache: plant different tokens to prove it.
	planted := make([]uint16, len(want))
	for i := range planted {
		planted[i] = 7
	}
	if err := WriteTokenFile(files[0], planted); err != nil {
		t.Fatal(err)
	}
	if got := load(); got[0] != 7 {
		t.Fatal("second load did not read the cache")
	}

	// A corrupt cache is reported, ignored and rewritten.
	if err := os.WriteFile(files[0], []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := load(); !slices.Equal(got, want) {
		t.Fatal("load with a corrupt cache differs from Encode")
	}
	if !strings.Contains(logs.String(), "ignoring unreadable token cache") {
		t.Fatalf("no warning about the corrupt cache; logs:\n%s", logs.String())
	}
	if toks, err := ReadTokenFile(files[0]); err != nil || len(toks) != len(want) {
		t.Fatalf("cache not rewritten: %v", err)
	}

	// Edited content gets a new entry.
	if err := os.WriteFile(txt, []byte(text+"More."), 0o644); err != nil {
		t.Fatal(err)
	}
	load()
	if n := len(cacheFiles(t, cdir)); n != 2 {
		t.Fatalf("%d cache files after an edit, want 2", n)
	}
}

func TestTextCacheOffAndByte(t *testing.T) {
	dir, cdir := t.TempDir(), t.TempDir()
	txt := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(txt, []byte(strings.Repeat("abc ", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ tok, dir string }{{"byte", cdir}, {"gpt2", CacheOff}} {
		l, err := NewLoader(LoaderConfig{Data: Config{Source: txt, Tokenizer: tc.tok, CacheDir: tc.dir}, SeqLen: 8, Vocab: 50304})
		if err != nil {
			t.Fatal(err)
		}
		if l.TrainTokens() == 0 {
			t.Fatal("no tokens")
		}
	}
	if files := cacheFiles(t, cdir); len(files) != 0 {
		t.Fatalf("cache written for byte tokenizer or with cache off: %v", files)
	}
	if _, err := NewLoader(LoaderConfig{Data: Config{Source: filepath.Join(dir, "gone.txt"), Tokenizer: "byte"}, SeqLen: 8, Vocab: 256}); err == nil ||
		!strings.Contains(err.Error(), "gone.txt") {
		t.Fatalf("missing text file: err = %v", err)
	}
}

func TestEmbeddedLoaders(t *testing.T) {
	for _, tc := range []struct {
		tok   string
		vocab int
	}{{"byte", 256}, {"gpt2", 50304}} {
		l, err := NewLoader(LoaderConfig{Data: Config{Source: "embedded", Tokenizer: tc.tok, ValFraction: 0.1}, SeqLen: 64, Vocab: tc.vocab, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		in, tg := make([]int32, 2*64), make([]int32, 2*64)
		if err := l.ValBatch(0, 2, in, tg); err != nil {
			t.Fatal(err)
		}
		// The validation split is the end of the novel.
		text, _ := EmbeddedText()
		dec := l.Tokenizer().Decode(in[:64])
		if !strings.Contains(text[len(text)*85/100:], dec) {
			t.Fatalf("%s: first validation sequence %q is not from the last part of the novel", tc.tok, dec)
		}
		t.Logf("%s: %d train tokens, %d val tokens, %d train samples/epoch", tc.tok, l.TrainTokens(), l.ValTokens(), l.TrainSamples())
	}
}
