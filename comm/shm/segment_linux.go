package shm

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"trellis/device"
)

// segment is one mapped segment file.
type segment struct {
	path string
	m    mem
	l    layout
	ino  uint64 // the file's inode, to tell a replaced file from this one
}

// errExists: createSegment lost the race to another creator.
var errExists = errors.New("shm: segment exists")

// Usable checks that dir can hold segments of the given size: it exists,
// is a directory this process can write, and has that many bytes free. Its
// error is one line naming dir.
func Usable(dir string, bytes int64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("shm: %s: %v: shared memory is unusable here", dir, err)
	}
	if err := syscall.Access(dir, 2|1); err != nil { // W_OK|X_OK
		return fmt.Errorf("shm: %s: not writable (%v): shared memory is unusable here", dir, err)
	}
	if free := int64(st.Bavail) * st.Bsize; free < bytes {
		return fmt.Errorf("shm: %s has %s free, %s are needed: shared memory is too small here (enlarge it, e.g. docker --shm-size)",
			dir, device.FormatBytes(free), device.FormatBytes(bytes))
	}
	return nil
}

// createSegment makes the segment at dir/name with layout l, every page
// allocated up front (so that running out of /dev/shm is an error here,
// not a SIGBUS later), and publishes it atomically: it is built under a
// temporary name and linked into place, so an opener never sees it half
// made. It returns errExists if another process published one first.
func createSegment(dir, name string, l layout, nonce uint64) (*segment, error) {
	path := filepath.Join(dir, name)
	if err := Usable(dir, int64(l.total)); err != nil {
		return nil, err
	}
	var r [6]byte
	rand.Read(r[:])
	tmp := fmt.Sprintf("%s.tmp-%d-%s", path, os.Getpid(), hex.EncodeToString(r[:]))
	fd, err := syscall.Open(tmp, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shm: create %s: %v", tmp, err)
	}
	defer syscall.Close(fd)
	defer os.Remove(tmp)
	if err := syscall.Fallocate(fd, 0, 0, int64(l.total)); err != nil {
		return nil, fmt.Errorf("shm: allocate %s for %s: %v (%s)", device.FormatBytes(int64(l.total)), path, err, dir)
	}
	b, err := syscall.Mmap(fd, 0, l.total, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map %s: %v", path, err)
	}
	s := &segment{path: path, m: mem(b), l: l}
	s.initHeader(nonce)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err == nil {
		s.ino = st.Ino
	}
	if err := os.Link(tmp, path); err != nil {
		s.unmap()
		if errors.Is(err, os.ErrExist) {
			return nil, errExists
		}
		return nil, fmt.Errorf("shm: publish %s: %v", path, err)
	}
	return s, nil
}

func (s *segment) initHeader(nonce uint64) {
	m, l := s.m, s.l
	binary.LittleEndian.PutUint32(m[hVersion:], version)
	binary.LittleEndian.PutUint32(m[hSize:], uint32(l.p))
	binary.LittleEndian.PutUint64(m[hNonce:], nonce)
	binary.LittleEndian.PutUint64(m[hSlice:], uint64(l.slice))
	binary.LittleEndian.PutUint32(m[hDepth:], uint32(l.depth))
	binary.LittleEndian.PutUint32(m[hRing:], uint32(l.ring))
	binary.LittleEndian.PutUint64(m[hBytes:], uint64(l.total))
	m.u64(hMagic).Store(magic) // last: an opener checks it first
}

// openSegment maps the published segment at path. It returns an error
// wrapping os.ErrNotExist while there is none.
func openSegment(path string) (*segment, error) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: stat %s: %v", path, err)
	}
	if st.Size < pageSize {
		return nil, fmt.Errorf("shm: %s is %d bytes: not a segment", path, st.Size)
	}
	b, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map %s: %v", path, err)
	}
	m := mem(b)
	le := binary.LittleEndian
	if m.u64(hMagic).Load() != magic || le.Uint32(m[hVersion:]) != version || int64(le.Uint64(m[hBytes:])) != st.Size {
		syscall.Munmap(b)
		return nil, fmt.Errorf("shm: %s is not a trellis segment of this version", path)
	}
	l := newLayout(int(le.Uint32(m[hSize:])), int(le.Uint64(m[hSlice:])), int(le.Uint32(m[hDepth:])), int(le.Uint32(m[hRing:])))
	if l.total != int(st.Size) {
		syscall.Munmap(b)
		return nil, fmt.Errorf("shm: %s: its header does not match its size", path)
	}
	return &segment{path: path, m: m, l: l, ino: st.Ino}, nil
}

func (s *segment) nonce() uint64 { return binary.LittleEndian.Uint64(s.m[hNonce:]) }

// replaced reports whether the file at s.path is gone or another file.
func (s *segment) replaced() bool {
	var st syscall.Stat_t
	return syscall.Stat(s.path, &st) != nil || st.Ino != s.ino
}

// unlink removes the file; the mapping lives on until every process
// unmaps it (or exits).
func (s *segment) unlink() { os.Remove(s.path) }

func (s *segment) unmap() {
	if s.m != nil {
		syscall.Munmap(s.m)
		s.m = nil
	}
}

// RemoveSegments removes every segment file in dir whose name starts with
// prefix + "-" (a job's, see Config.Name), returning how many it removed:
// the launcher's clean-up after its workers have exited, whatever killed
// them. Mappings still held by live processes are unaffected.
func RemoveSegments(dir, prefix string) (int, error) {
	if prefix == "" {
		return 0, errors.New("shm: RemoveSegments: empty prefix")
	}
	matches, err := filepath.Glob(filepath.Join(dir, globEscape(prefix)+"-*"))
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, p := range matches {
		if err := os.Remove(p); err == nil {
			n++
		} else if !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// globEscape escapes the pattern characters of a name (names are checked
// to be [A-Za-z0-9._-], so there are none; this keeps RemoveSegments safe
// for any prefix).
func globEscape(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '*' || c == '?' || c == '[' || c == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}
