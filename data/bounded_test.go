package data

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSourceMustBeABoundedRegularFile: a device, a pipe or a text file
// past MaxTextBytes is refused by Validate (data.source=/dev/zero used to
// read without bound), and the read itself stops at its limit.
func TestSourceMustBeABoundedRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.txt")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.txt") // sparse: no disk used
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxTextBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, c := range []struct{ source, want string }{
		{"/dev/zero", "is not a regular file (a character device)"},
		{fifo, "is not a regular file (a named pipe)"},
		{big, "more than the 1073741824 (1 GiB) a text source may have"},
	} {
		err := Config{Source: c.source, Tokenizer: ByteName}.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want %q", c.source, err, c.want)
		}
	}

	small := filepath.Join(dir, "small.txt")
	if err := os.WriteFile(small, []byte("0123456789a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readBounded(small, 10); err == nil || !strings.Contains(err.Error(), "more than the 10 bytes") {
		t.Errorf("readBounded past its limit: %v", err)
	}
	if b, err := readBounded(small, 11); err != nil || string(b) != "0123456789a" {
		t.Errorf("readBounded at its limit: %q, %v", b, err)
	}
	if _, err := readBounded("/dev/zero", 10); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("readBounded(/dev/zero): %v", err)
	}
}
