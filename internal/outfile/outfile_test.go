package outfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "run.jsonl")
	os.WriteFile(in, []byte("metrics\n"), 0o644)
	hard := filepath.Join(dir, "hard.html")
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.html")
	os.Symlink(in, link)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	os.Symlink(filepath.Join(dir, "nothing"), dangling)
	for _, c := range []struct{ name, path, want string }{
		{"its own input", in, "is the input"},
		{"a hard link to its input", hard, "is the input"},
		{"a symbolic link to its input", link, "is the input"},
		{"a FIFO", fifo, "is a named pipe (FIFO), not a regular file"},
		{"a device", "/dev/null", "is a character device, not a regular file"},
		{"a directory", dir, "is a directory, not a regular file"},
		{"a dangling link", dangling, "symbolic link to nothing"},
	} {
		err := WriteBytes("-o", c.path, []byte("<html>"), in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if b, _ := os.ReadFile(in); string(b) != "metrics\n" {
		t.Fatalf("the input changed: %q", b)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was replaced: %v %v", st.Mode(), err)
	}
}

func TestWriteThroughLink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.html")
	os.WriteFile(real, []byte("old"), 0o600)
	link := filepath.Join(dir, "link.html")
	os.Symlink(real, link)
	if err := WriteBytes("-o", link, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced by a file: %v", err)
	}
	st, _ := os.Stat(real)
	if b, _ := os.ReadFile(real); string(b) != "new" || st.Mode().Perm() != 0o600 {
		t.Fatalf("target %q mode %v, want new 0600", b, st.Mode().Perm())
	}
	// A failed write leaves the target and no temporary file.
	err := Write("-o", real, func(w io.Writer) error { w.Write([]byte("half")); return errors.New("boom") })
	if err == nil {
		t.Fatal("no error")
	}
	if b, _ := os.ReadFile(real); string(b) != "new" {
		t.Fatalf("after a failed write: %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("left behind: %v", ents)
	}
}
