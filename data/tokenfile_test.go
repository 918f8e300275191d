package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, toks := range [][]uint16{{}, {7}, {0, 1, 65535, 50256, 42}} {
		p := filepath.Join(dir, "x.bin")
		if err := WriteTokenFile(p, toks); err != nil {
			t.Fatal(err)
		}
		st, _ := os.Stat(p)
		if st.Size() != int64(TokenHeaderBytes+2*len(toks)) {
			t.Fatalf("size %d, want %d", st.Size(), TokenHeaderBytes+2*len(toks))
		}
		got, err := ReadTokenFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(toks) {
			t.Fatalf("read %v, wrote %v", got, toks)
		}
		for i := range got {
			if got[i] != toks[i] {
				t.Fatalf("read %v, wrote %v", got, toks)
			}
		}
	}
	// No temporary files are left behind.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want 1", len(ents))
	}
}

// TestTokenFileLayout pins the byte layout to llm.c's writer: little-endian
// int32 header words and uint16 tokens right after 1024 bytes.
func TestTokenFileLayout(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.bin")
	if err := WriteTokenFile(p, []uint16{0x0102, 0xfffe}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	want := []byte{0x88, 0xd8, 0x34, 0x01, 1, 0, 0, 0, 2, 0, 0, 0} // 20240520 = 0x0134D888
	if !bytes.Equal(b[:12], want) {
		t.Fatalf("header starts % x, want % x", b[:12], want)
	}
	if !bytes.Equal(b[12:1024], make([]byte, 1012)) {
		t.Fatal("header words 3..255 are not zero")
	}
	if !bytes.Equal(b[1024:], []byte{0x02, 0x01, 0xfe, 0xff}) {
		t.Fatalf("tokens % x", b[1024:])
	}
}

func header(magic, version, count int32) []byte {
	b := make([]byte, TokenHeaderBytes)
	binary.LittleEndian.PutUint32(b[0:], uint32(magic))
	binary.LittleEndian.PutUint32(b[4:], uint32(version))
	binary.LittleEndian.PutUint32(b[8:], uint32(count))
	return b
}

func TestReadTokenFileErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		content []byte
		want    string
	}{
		{"short.bin", []byte{1, 2, 3}, "shorter than the 1024-byte header"},
		{"magic.bin", header(123, 1, 0), "magic 123"},
		{"version.bin", header(TokenFileMagic, 2, 0), "version 2"},
		{"negative.bin", header(TokenFileMagic, 1, -5), "negative token count"},
		{"truncated.bin", append(header(TokenFileMagic, 1, 3), 1, 0, 2, 0), "header says 3 tokens"},
		{"long.bin", append(header(TokenFileMagic, 1, 1), 1, 0, 2, 0), "header says 1 tokens"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, tc.content, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadTokenFile(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("err = %v, want one naming %s and containing %q", err, p, tc.want)
			}
			if !errors.Is(err, ErrBadTokenFile) {
				t.Fatalf("err = %v does not match ErrBadTokenFile", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
	missing := filepath.Join(dir, "missing.bin")
	if _, err := ReadTokenFile(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing file: err = %v", err)
	}
}

// FuzzDecodeTokenHeader: the decoder never panics, accepts exactly the
// headers with llm.c's magic, version 1 and a non-negative count, and what
// it accepts re-encodes to the same first three words.
func FuzzDecodeTokenHeader(f *testing.F) {
	f.Add(header(TokenFileMagic, 1, 100))
	f.Add(header(TokenFileMagic, 2, 1))
	f.Add(header(TokenFileMagic, 1, -1))
	f.Add([]byte{0x88, 0xd8, 0x34, 0x01})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeTokenHeader(b)
		valid := len(b) >= TokenHeaderBytes &&
			binary.LittleEndian.Uint32(b) == TokenFileMagic &&
			binary.LittleEndian.Uint32(b[4:]) == 1 &&
			int32(binary.LittleEndian.Uint32(b[8:])) >= 0
		if valid != (err == nil) {
			t.Fatalf("valid=%v but err=%v", valid, err)
		}
		if err != nil {
			if !errors.Is(err, ErrBadTokenFile) {
				t.Fatalf("error %v does not match ErrBadTokenFile", err)
			}
			return
		}
		enc, err := EncodeTokenHeader(h.Count)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc[:12], b[:12]) {
			t.Fatalf("re-encoded % x, input % x", enc[:12], b[:12])
		}
	})
}
