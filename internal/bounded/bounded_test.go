package bounded

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	big := filepath.Join(dir, "big")
	os.WriteFile(small, []byte("hello"), 0o644)
	os.WriteFile(big, make([]byte, 2048), 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(small, 1024, "test file"); err != nil || string(b) != "hello" {
		t.Fatalf("small: %q %v", b, err)
	}
	for _, c := range []struct {
		name, path string
		regular    bool
		want       string
	}{
		{"regular over the bound", big, false, "a test file may have at most 1024 bytes (1 KiB)"},
		{"/dev/zero", "/dev/zero", false, "a test file may have at most 1024 bytes"},
		{"/dev/zero, regular only", "/dev/zero", true, "must be a regular file, not a character device"},
		{"fifo, regular only", fifo, true, "not a named pipe (FIFO)"},
		{"directory", dir, true, "not a directory"},
	} {
		read := ReadFile
		if c.regular {
			read = ReadRegular
		}
		_, err := read(c.path, 1024, "test file")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if !c.regular && !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: %v does not match ErrTooLarge", c.name, err)
		}
	}
}

// A FIFO nobody writes reads as empty instead of blocking the open.
func TestReadFileFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(fifo, 1024, "test file"); err != nil || len(b) != 0 {
		t.Fatalf("%q %v, want empty", b, err)
	}
}
