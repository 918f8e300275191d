//go:build !linux

package shm

import (
	"errors"

	"trellis/comm"
)

// errNoShm is every operation's error off Linux: the transport needs its
// shared mappings, futexes and pidfds.
var errNoShm = errors.New("shm: the shared-memory transport needs Linux")

// New fails: this platform has no shared-memory transport.
func New(cfg Config) (comm.Group, error) { return nil, errNoShm }

// Usable fails: see New.
func Usable(dir string, bytes int64) error { return errNoShm }

// RemoveSegments removes nothing here.
func RemoveSegments(dir, prefix string) (int, error) { return 0, nil }
