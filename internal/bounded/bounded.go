// Package bounded reads files that come from outside (configuration
// files, framework configurations, traces) with a size bound, so that a
// path naming /dev/zero, a FIFO nobody closes or a file of gigabytes is a
// one-line error instead of a read without end.
package bounded

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Limits for the kinds of files Trellis reads whole.
const (
	// Config bounds a configuration: a job, cluster or model file, a
	// framework's configuration or argument file (real ones are a few KiB).
	Config = 1 << 20
	// Trace bounds one trace file (a long traced run's are tens of MiB).
	Trace = 1 << 30
)

// ErrTooLarge is matched (errors.Is) by the error of a file over its bound.
var ErrTooLarge = errors.New("file too large")

// ReadFile reads path whole, refusing it when it holds more than limit
// bytes; what names the file's role in the error ("cluster file"). Pipes
// and devices are read up to the bound (so <(...) works and /dev/zero
// fails after limit bytes).
func ReadFile(path string, limit int64, what string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err // *fs.PathError names the file
	}
	flags := os.O_RDONLY
	if st.Mode()&fs.ModeNamedPipe != 0 {
		// A FIFO that no process writes would block the open itself;
		// non-blocking, it reads as empty once its writers are gone.
		flags |= syscall.O_NONBLOCK
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return read(f, path, limit, what)
}

// ReadRegular is ReadFile for a file that must be a regular file (after
// symbolic links): a device, FIFO, socket or directory is refused before
// anything is read.
func ReadRegular(path string, limit int64, what string) ([]byte, error) {
	st, err := os.Stat(path) // before opening: opening a FIFO blocks
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: a %s must be a regular file, not %s", path, what, Kind(st.Mode()))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return read(f, path, limit, what)
}

func read(f *os.File, path string, limit int64, what string) ([]byte, error) {
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > limit {
		return nil, tooLarge(path, limit, what)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(path, limit, what)
	}
	return b, nil
}

func tooLarge(path string, limit int64, what string) error {
	return tooLargeError(fmt.Sprintf("%s: a %s may have at most %d bytes (%s)", path, what, limit, Size(limit)))
}

// tooLargeError matches ErrTooLarge without repeating its text.
type tooLargeError string

func (e tooLargeError) Error() string        { return string(e) }
func (e tooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Size writes a power-of-two byte count as KiB, MiB or GiB.
func Size(n int64) string {
	for _, u := range []struct {
		s    string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.s)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// Kind names what a file mode says a file is, for errors.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}
