package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// LockFile is the file in a root whose OS lock (flock) marks the one run
// writing checkpoints there. The lock is held for the run and released by
// the kernel when its process ends, however it ends: a lock file left by a
// dead run is no lock. The file's text names the holder (Holder), for the
// error a second writer gets.
const LockFile = "run.lock"

// ErrLocked is matched (errors.Is) by the error of a run refused because
// another process holds the root's lock, and by Commit's when this process
// no longer holds it.
var ErrLocked = errors.New("checkpoint directory has another writer")

// Holder is who holds (or last held) a root's lock.
type Holder struct {
	PID   int    `json:"pid"`
	Host  string `json:"host,omitempty"`
	Run   string `json:"run,omitempty"` // the run's id (Run.ID)
	Since string `json:"since,omitempty"`
}

func (h Holder) String() string {
	s := fmt.Sprintf("pid %d", h.PID)
	if h.Host != "" {
		s += " on " + h.Host
	}
	if h.Run != "" {
		s += " (run " + h.Run
		if h.Since != "" {
			s += ", since " + h.Since
		}
		s += ")"
	}
	return s
}

// Lock is a held claim on a root; Release it when the run ends.
type Lock struct {
	root  string
	f     *os.File
	me    Holder
	flock bool   // the OS lock is held (false: this filesystem has none; the holder's pid is checked instead)
	prev  []byte // the lock file's text before this process took it (Withdraw)
	// Stale is the previous holder named in the lock file when it was
	// taken over from a process that no longer runs (nil: none).
	Stale *Holder
}

// Acquire takes root's lock for run (creating root and the lock file)
// without waiting. When another live process holds it the error names that
// process and its run and matches ErrLocked.
func Acquire(root, run string) (*Lock, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	path := filepath.Join(root, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	host, _ := os.Hostname()
	l := &Lock{root: root, f: f, me: Holder{PID: os.Getpid(), Host: host, Run: run, Since: time.Now().UTC().Format(time.RFC3339)}}
	err = lockOrHolder(f, path)
	// The text the last holder left, read once the lock is ours (or there
	// are no locks): empty after a release, a dead holder's name after a
	// crash.
	prevText, _ := readBounded(path, 4096)
	prev := parseHolder(prevText)
	l.prev = prevText
	switch {
	case err == nil:
		l.flock = true
	case errors.Is(err, ErrLocked):
		f.Close()
		return nil, lockedError{fmt.Sprintf("checkpoint.dir=%s %s", root, err.(lockedError).msg)}
	case errors.Is(err, errNoLocks):
		// No OS locks here (some network filesystems): the lock file's
		// pid decides, when it names a live process of this host.
		if prev.PID != 0 && prev.PID != l.me.PID && (prev.Host != host || alive(prev.PID)) {
			f.Close()
			return nil, lockedBy(root, prev)
		}
	default:
		f.Close()
		return nil, fmt.Errorf("checkpoint: lock %s: %w", path, err)
	}
	if prev.PID != 0 && prev.PID != l.me.PID {
		l.Stale = &prev
	}
	if err := l.write(); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// lockOrHolder takes f's lock without waiting, or says who holds it (a
// lockedError naming the holder). A holder writes its name right after
// taking the lock and empties the file right before giving it up, so a
// held lock whose file is empty is about to be named or to be free: for
// up to 50 ms the file is read again and the lock tried again.
func lockOrHolder(f *os.File, path string) error {
	var h Holder
	for i := 0; ; i++ {
		err := tryLock(f, true)
		if !errors.Is(err, errWouldBlock) {
			return err
		}
		text, _ := readBounded(path, 4096)
		if h = parseHolder(text); h.PID != 0 || i == 50 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return holderError(h)
}

// holderError is the locked error's tail naming holder h.
func holderError(h Holder) error {
	who := "another process"
	if h.PID != 0 {
		who = h.String()
	}
	return lockedError{fmt.Sprintf("is being written by %s: one directory has one writer; wait for that run to end, or give this one its own directory (--set checkpoint.dir=runs/NAME)", who)}
}

func lockedBy(root string, h Holder) error {
	return lockedError{fmt.Sprintf("checkpoint.dir=%s %s", root, holderError(h).(lockedError).msg)}
}

// lockedError is an error that matches ErrLocked without repeating its text.
type lockedError struct{ msg string }

func (e lockedError) Error() string        { return e.msg }
func (e lockedError) Is(target error) bool { return target == ErrLocked }

// write records this process as the holder, in place: the lock belongs to
// the file (its inode), so the file is never replaced.
func (l *Lock) write() error {
	b, _ := json.Marshal(l.me)
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := l.f.WriteAt(append(b, '\n'), 0); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// Release gives the lock up (nil: nothing to do). The lock file stays,
// emptied: it names a holder only while one holds it (or after one died
// holding it: its text then tells who, for Lock.Stale). A run that wrote
// nothing else therefore leaves the directory as it found it.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	l.f.Truncate(0)
	if l.flock {
		unlock(l.f)
	}
	l.f.Close()
	l.f = nil
}

// Withdraw gives the lock up as Release does, first putting the lock
// file's text back as it was: a run refused after taking the lock (the
// directory holds another run's checkpoints) leaves the directory as it
// found it.
func (l *Lock) Withdraw() {
	if l == nil || l.f == nil {
		return
	}
	if l.f.Truncate(0) == nil {
		l.f.WriteAt(l.prev, 0)
	}
	if l.flock {
		unlock(l.f)
	}
	l.f.Close()
	l.f = nil
}

// readHolder reads the holder a lock file names (zero when it names none).
func readHolder(path string) (Holder, error) {
	b, err := readBounded(path, 4096)
	if err != nil {
		return Holder{}, err
	}
	return parseHolder(b), nil
}

func parseHolder(b []byte) Holder {
	var h Holder
	if json.Unmarshal(b, &h) != nil {
		return Holder{}
	}
	return h
}

// CheckHeld reports whether this process holds root's lock, as Commit
// checks before publishing a step: a root with a lock file must have it
// held (an attempt to share it fails) and name this process. A root
// without a lock file has no claimed writer and passes.
func CheckHeld(root string) error {
	path := filepath.Join(root, LockFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	h, _ := readHolder(path)
	host, _ := os.Hostname()
	mine := h.PID == os.Getpid() && h.Host == host
	switch err := tryLock(f, false); {
	case err == nil:
		unlock(f)
		return lockedError{fmt.Sprintf("checkpoint: %s: nobody holds it: this run lost its claim on checkpoint.dir=%s (the lock file was replaced?), so it does not save there", path, root)}
	case errors.Is(err, errWouldBlock), errors.Is(err, errNoLocks):
		if !mine {
			return lockedError{fmt.Sprintf("checkpoint: checkpoint.dir=%s is now held by %s, not this run: it does not save there", root, h)}
		}
		return nil
	default:
		return fmt.Errorf("checkpoint: lock %s: %w", path, err)
	}
}

// Busy reports whether another open file holds root's lock now (a run is
// writing there), and who, without taking it.
func Busy(root string) (Holder, bool) {
	path := filepath.Join(root, LockFile)
	f, err := os.Open(path)
	if err != nil {
		return Holder{}, false
	}
	defer f.Close()
	if err := tryLock(f, false); err != nil {
		h, _ := readHolder(path)
		return h, errors.Is(err, errWouldBlock)
	}
	unlock(f)
	return Holder{}, false
}
