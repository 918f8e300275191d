package checkpoint

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// RunFile is the file in a root naming the run that writes its
// checkpoints. A root belongs to one run: a new run refuses a root that
// holds another run's complete checkpoints, so no run replaces another's
// steps or re-points its latest.
const RunFile = "run.json"

// Run identifies the run that owns a root.
type Run struct {
	// ID is random, drawn when the run starts afresh and kept by every
	// resumption (it travels in the checkpoints' metadata).
	ID      string `json:"id"`
	Started string `json:"started,omitempty"` // RFC 3339, when this process claimed the root
	Host    string `json:"host,omitempty"`
	PID     int    `json:"pid,omitempty"`
}

// NewRunID returns 16 random hex digits.
func NewRunID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand panics on a broken source)
	return hex.EncodeToString(b[:])
}

// ReadRun returns the owner recorded in root; ok is false when root has no
// run file.
func ReadRun(root string) (r Run, ok bool, err error) {
	b, err := readBounded(filepath.Join(root, RunFile), 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return Run{}, false, nil
	}
	if err != nil {
		return Run{}, false, fmt.Errorf("checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
		return Run{}, false, fmt.Errorf("checkpoint: %s: not a run file (want {\"id\": ...}): %v", filepath.Join(root, RunFile), err)
	}
	return r, true, nil
}

// WriteRun records r as the owner of root, creating root.
func WriteRun(root string, r Run) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	path := filepath.Join(root, RunFile)
	err = writeAtomic(path, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err })
	if err != nil {
		return fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return nil
}

// Steps lists the complete steps under root (directories step-N holding an
// index), ascending; a root that does not exist has none.
func Steps(root string) ([]int, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var steps []int
	for _, e := range entries {
		n, ok := parseStep(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, e.Name(), IndexName)); err == nil {
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// CheckWritable reports, without creating anything that stays, whether
// checkpoints can be written under root: root must be a writable directory,
// or not exist under a writable directory (it is created at the first save).
// The error names root and the reason.
func CheckWritable(root string) error {
	dir := filepath.Clean(root)
	for {
		st, err := os.Stat(dir)
		if err == nil {
			if !st.IsDir() {
				if dir == filepath.Clean(root) {
					return fmt.Errorf("checkpoint: dir %s is a file, want a directory", root)
				}
				return fmt.Errorf("checkpoint: dir %s cannot be created: %s is a file", root, dir)
			}
			return probeDir(root, dir)
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("checkpoint: dir %s: %w", root, err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return fmt.Errorf("checkpoint: dir %s cannot be created: no existing parent", root)
		}
		dir = parent
	}
}

// probeDir creates and removes a temporary file in dir, the nearest
// existing directory of root.
func probeDir(root, dir string) error {
	f, err := os.CreateTemp(dir, ".trellis-probe-*")
	if err != nil {
		if dir == filepath.Clean(root) {
			return fmt.Errorf("checkpoint: dir %s is not writable: %w", root, unwrapPath(err))
		}
		return fmt.Errorf("checkpoint: dir %s cannot be created in %s: %w", root, dir, unwrapPath(err))
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// unwrapPath drops *fs.PathError's operation and path, which the caller's
// message already names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Discard removes the partial directory of step, after a failed save, so
// that no half-written step is left behind.
func (s *Store) Discard(step int) error {
	if err := os.RemoveAll(s.partialDir(step)); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
