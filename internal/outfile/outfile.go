// Package outfile writes the files a command is told to write (-o, --out)
// without destroying anything it was not asked to: an output that names
// one of the command's inputs is refused (the report would replace its
// metrics), so is one that exists and is not a regular file (a FIFO, a
// device such as /dev/full, a directory); a symbolic link to a regular file
// is written through, the link kept. The file appears whole or not at all
// (temporary file in the same directory, fsync, rename).
package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"trellis/internal/bounded"
)

// ErrRefused is matched (errors.Is) by Check's and Write's refusals.
var ErrRefused = errors.New("output refused")

// refused is an error that matches ErrRefused without repeating its text.
type refused string

func (e refused) Error() string        { return string(e) }
func (e refused) Is(target error) bool { return target == ErrRefused }

// Check reports whether path may be written as the output named by flag
// (e.g. "-o"): it must not be one of inputs (the same file, by any name),
// and when it exists it must be a regular file or a symbolic link to one.
func Check(flag, path string, inputs ...string) error {
	if path == "" {
		return refused(fmt.Sprintf("%s is empty", flag))
	}
	st, err := os.Stat(path) // follows symbolic links
	if errors.Is(err, fs.ErrNotExist) {
		if _, lerr := os.Lstat(path); lerr == nil {
			return refused(fmt.Sprintf("%s %s is a symbolic link to nothing: write to a file, or remove the link", flag, path))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if !st.Mode().IsRegular() {
		return refused(fmt.Sprintf("%s %s is %s, not a regular file: it would be replaced (an output is a regular file, or a symbolic link to one)",
			flag, path, bounded.Kind(st.Mode())))
	}
	for _, in := range inputs {
		if in == "" {
			continue
		}
		if ist, err := os.Stat(in); err == nil && os.SameFile(st, ist) {
			return refused(fmt.Sprintf("%s %s is the input %s: writing it would replace what it is made from; choose another file", flag, path, in))
		}
	}
	return nil
}

// Write checks path (Check) and writes it with write: into a temporary
// file next to the real target (a symbolic link's target), synced, then
// renamed over it. A failed write leaves the target as it was.
func Write(flag, path string, write func(io.Writer) error, inputs ...string) error {
	if err := Check(flag, path, inputs...); err != nil {
		return err
	}
	target, mode := path, fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
		if target, err = filepath.EvalSymlinks(path); err != nil {
			return fmt.Errorf("%s %s: %w", flag, path, err)
		}
	}
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, target)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return nil
}

// WriteBytes is Write of b.
func WriteBytes(flag, path string, b []byte, inputs ...string) error {
	return Write(flag, path, func(w io.Writer) error { _, err := w.Write(b); return err }, inputs...)
}
