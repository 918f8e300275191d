package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// llm.c's token file (dev/data/data_common.py, write_datafile): a header of
// 256 little-endian int32 — magic 20240520, version 1, the token count,
// the rest zero — followed by the tokens as little-endian uint16.
const (
	TokenFileMagic   = 20240520
	TokenFileVersion = 1
	TokenHeaderBytes = 256 * 4
)

// ErrBadTokenFile is matched (errors.Is) by every header or size error of a
// token file.
var ErrBadTokenFile = errors.New("not an llm.c token file")

// TokenHeader is the decoded header of a token file.
type TokenHeader struct {
	Version int
	Count   int64 // number of uint16 tokens after the header
}

// DecodeTokenHeader checks and decodes the first TokenHeaderBytes of a token
// file. It rejects short input, a wrong magic, an unsupported version and a
// negative count. It never panics.
func DecodeTokenHeader(b []byte) (TokenHeader, error) {
	if len(b) < TokenHeaderBytes {
		return TokenHeader{}, fmt.Errorf("%w: header is %d bytes, want %d", ErrBadTokenFile, len(b), TokenHeaderBytes)
	}
	magic := int32(binary.LittleEndian.Uint32(b[0:]))
	version := int32(binary.LittleEndian.Uint32(b[4:]))
	count := int32(binary.LittleEndian.Uint32(b[8:]))
	switch {
	case magic != TokenFileMagic:
		return TokenHeader{}, fmt.Errorf("%w: magic %d, want %d", ErrBadTokenFile, magic, TokenFileMagic)
	case version != TokenFileVersion:
		return TokenHeader{}, fmt.Errorf("%w: version %d, want %d (uint16 tokens)", ErrBadTokenFile, version, TokenFileVersion)
	case count < 0:
		return TokenHeader{}, fmt.Errorf("%w: negative token count %d", ErrBadTokenFile, count)
	}
	return TokenHeader{Version: int(version), Count: int64(count)}, nil
}

// EncodeTokenHeader returns the header for count tokens.
func EncodeTokenHeader(count int64) ([]byte, error) {
	if count < 0 || count > math.MaxInt32 {
		return nil, fmt.Errorf("data: token count %d does not fit an llm.c header (max %d)", count, math.MaxInt32)
	}
	b := make([]byte, TokenHeaderBytes)
	binary.LittleEndian.PutUint32(b[0:], TokenFileMagic)
	binary.LittleEndian.PutUint32(b[4:], TokenFileVersion)
	binary.LittleEndian.PutUint32(b[8:], uint32(count))
	return b, nil
}

// ReadTokenFile reads an llm.c token file. The file's size must be exactly
// the header plus 2 bytes per token; every error names the file.
func ReadTokenFile(path string) ([]uint16, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	hb := make([]byte, TokenHeaderBytes)
	if _, err := io.ReadFull(f, hb); err != nil {
		return nil, fmt.Errorf("data: %s: %w: file is %d bytes, shorter than the %d-byte header", path, ErrBadTokenFile, st.Size(), TokenHeaderBytes)
	}
	h, err := DecodeTokenHeader(hb)
	if err != nil {
		return nil, fmt.Errorf("data: %s: %w", path, err)
	}
	if want := TokenHeaderBytes + 2*h.Count; st.Size() != want {
		return nil, fmt.Errorf("data: %s: %w: header says %d tokens (%d bytes in all), file is %d bytes", path, ErrBadTokenFile, h.Count, want, st.Size())
	}
	toks := make([]uint16, h.Count)
	buf := make([]byte, 1<<20)
	for done := 0; done < len(toks); {
		n := min(len(buf)/2, len(toks)-done)
		if _, err := io.ReadFull(f, buf[:2*n]); err != nil {
			return nil, fmt.Errorf("data: %s: %w", path, err)
		}
		for i := 0; i < n; i++ {
			toks[done+i] = binary.LittleEndian.Uint16(buf[2*i:])
		}
		done += n
	}
	return toks, nil
}

// WriteTokenFile writes tokens as an llm.c token file, atomically: to a
// temporary file in the same directory, synced, then renamed over path, so a
// crash never leaves a partial file under that name.
func WriteTokenFile(path string, tokens []uint16) error {
	hdr, err := EncodeTokenHeader(int64(len(tokens)))
	if err != nil {
		return fmt.Errorf("data: %s: %w", path, err)
	}
	body := make([]byte, 2*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint16(body[2*i:], t)
	}
	return writeAtomic(path, hdr, body)
}

// writeAtomic writes the parts to path through a synced temporary file and
// a rename.
func writeAtomic(path string, parts ...[]byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	for _, p := range parts {
		if _, err = tmp.Write(p); err != nil {
			return fmt.Errorf("data: %w", err)
		}
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	return nil
}
