package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// metricsFile is --metrics FILE, opened at the first write, so that a run
// that fails before its first step overwrites nothing. A fresh run
// truncates the file; a resumed run (after >= 0) keeps the lines of steps
// up to after — the checkpoint's step — and appends behind them, so a run
// interrupted and resumed has every step exactly once.
type metricsFile struct {
	path  string
	after int // the resumed checkpoint's step; -1: a fresh run
	f     *os.File
	err   error
}

func (m *metricsFile) Write(p []byte) (int, error) {
	if m.f == nil && m.err == nil {
		m.f, m.err = m.open()
		if m.err != nil {
			m.err = fmt.Errorf("--metrics %s: %w", m.path, m.err)
		}
	}
	if m.err != nil {
		return 0, m.err
	}
	return m.f.Write(p)
}

func (m *metricsFile) open() (*os.File, error) {
	if m.after < 0 {
		return os.Create(m.path)
	}
	f, err := os.OpenFile(m.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	keep, err := keptPrefix(f, m.after)
	if err == nil {
		err = f.Truncate(keep)
	}
	if err == nil {
		_, err = f.Seek(keep, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (m *metricsFile) Close() error {
	if m.f == nil {
		return nil
	}
	return m.f.Close()
}

// keptPrefix is the length of the leading whole lines of r that are JSON
// objects of steps <= after: what a run resumed at step after keeps. A
// partial last line (a crash mid-write) or a step past after ends it.
func keptPrefix(r io.Reader, after int) (int64, error) {
	br := bufio.NewReader(r)
	var n int64
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return n, nil // a line without its newline is partial
		}
		if err != nil {
			return 0, err
		}
		var m struct {
			Step *int `json:"step"`
		}
		if json.Unmarshal(line, &m) != nil || m.Step == nil || *m.Step > after {
			return n, nil
		}
		n += int64(len(line))
	}
}

// checkOutputFile reports, before step 1 and without changing anything,
// whether path can be written as a file: an existing writable file, or a
// new name in an existing writable directory.
func checkOutputFile(flag, path string) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return fmt.Errorf("%s %s: is a directory, want a file name", flag, path)
	case err == nil:
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("%s %s: not writable: %w", flag, path, unwrapPath(err))
		}
		return f.Close()
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: %w", flag, path, unwrapPath(err))
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("%s %s: directory %s does not exist", flag, path, dir)
	}
	f, err := os.CreateTemp(dir, ".trellis-probe-*")
	if err != nil {
		return fmt.Errorf("%s %s: directory %s is not writable: %w", flag, path, dir, unwrapPath(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
