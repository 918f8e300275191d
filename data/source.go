package data

import (
	"compress/bzip2"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// store is a read-only token sequence.
type store interface {
	Len() int64
	// Read fills dst with tokens [off, off+len(dst)).
	Read(dst []int32, off int64)
}

// u16Store holds tokens as uint16, as token files store them (half the
// memory of int32).
type u16Store []uint16

func (s u16Store) Len() int64 { return int64(len(s)) }

func (s u16Store) Read(dst []int32, off int64) {
	src := s[off : off+int64(len(dst))]
	for i, t := range src {
		dst[i] = int32(t)
	}
}

// syntheticStore is a virtual stream of n tokens, token i drawn uniformly
// from [0, vocab) by hashing (seed, i): nothing is held in memory.
type syntheticStore struct {
	n     int64
	vocab uint64
	seed  uint64
}

func (s syntheticStore) Len() int64 { return s.n }

func (s syntheticStore) Read(dst []int32, off int64) {
	for i := range dst {
		h := hash(s.seed, tagSynthetic, uint64(off)+uint64(i))
		dst[i] = int32((h >> 32) * s.vocab >> 32) // uniform in [0, vocab) by multiply-shift
	}
}

//go:embed corpus/pride_and_prejudice.txt.bz2
var embeddedCorpus string // a string, so the embedded bytes cannot be modified

// EmbeddedText returns the embedded corpus, Jane Austen's Pride and
// Prejudice (684,768 bytes of ASCII; see data/corpus/README.md).
func EmbeddedText() (string, error) {
	b, err := io.ReadAll(bzip2.NewReader(strings.NewReader(embeddedCorpus)))
	if err != nil {
		return "", fmt.Errorf("data: embedded corpus: %w", err)
	}
	return string(b), nil
}

// toU16 converts token ids to uint16 storage; every tokenizer here has a
// vocabulary below 65536.
func toU16(ids []int32) u16Store {
	out := make(u16Store, len(ids))
	for i, id := range ids {
		out[i] = uint16(id)
	}
	return out
}

// loadEmbedded tokenises the embedded corpus (about 0.1 s with gpt2).
func loadEmbedded(tok Tokenizer) (store, error) {
	text, err := EmbeddedText()
	if err != nil {
		return nil, err
	}
	return toU16(tok.Encode(text)), nil
}

// textCache says where tokenised text files are kept.
type textCache struct {
	dir string // "" disables caching
	log *slog.Logger
}

// CacheOff is the cache_dir value that disables the token cache.
const CacheOff = "off"

func newTextCache(dir string, log *slog.Logger) textCache {
	switch dir {
	case CacheOff:
		return textCache{log: log}
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			log.Warn("data: no user cache directory; text files will be tokenised on every run", "err", err)
			return textCache{log: log}
		}
		dir = filepath.Join(base, "trellis", "tokens")
	}
	return textCache{dir: dir, log: log}
}

// cachePath names the cache entry of a text file's content under a
// tokenizer: the SHA-256 of both keys it, so an edited file or another
// tokenizer never reads a stale entry.
func (c textCache) cachePath(path string, content []byte, tok string) string {
	h := sha256.New()
	h.Write([]byte("trellis-tokens-v1\x00" + tok + "\x00"))
	h.Write(content)
	key := hex.EncodeToString(h.Sum(nil))[:24]
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	return filepath.Join(c.dir, fmt.Sprintf("%s.%s.%s.bin", base, tok, key))
}

// loadText tokenises a text file once and caches the tokens as an llm.c
// token file; later runs read the cache. The byte tokenizer is not cached
// (its "tokenisation" is a copy). A failure to read or write the cache is
// logged and costs only time.
func loadText(path string, tok Tokenizer, cache textCache) (store, error) {
	content, err := readBounded(path, MaxTextBytes)
	if err != nil {
		return nil, err
	}
	if tok.Name() == ByteName || cache.dir == "" {
		return toU16(tok.Encode(string(content))), nil
	}
	cp := cache.cachePath(path, content, tok.Name())
	if toks, err := ReadTokenFile(cp); err == nil {
		return u16Store(toks), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		cache.log.Warn("data: ignoring unreadable token cache", "file", cp, "err", err)
	}
	toks := toU16(tok.Encode(string(content)))
	if err := os.MkdirAll(cache.dir, 0o755); err != nil {
		cache.log.Warn("data: cannot create token cache directory", "dir", cache.dir, "err", err)
	} else if err := WriteTokenFile(cp, toks); err != nil {
		cache.log.Warn("data: cannot write token cache", "file", cp, "err", err)
	} else {
		cache.log.Info("data: cached tokens", "text", path, "tokens", len(toks), "file", cp)
	}
	return toks, nil
}

// readBounded reads the regular file at path, refusing one (or one that
// grows while read) past limit bytes, so that no source reads without
// bound.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("data: source %s is not a regular file (%s)", path, fileKind(st.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("data: source %s is more than the %d bytes a text source may have", path, limit)
	}
	return b, nil
}
