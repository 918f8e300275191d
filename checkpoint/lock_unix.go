//go:build unix

package checkpoint

import (
	"errors"
	"os"
	"syscall"
)

var (
	errWouldBlock = syscall.EWOULDBLOCK
	errNoLocks    = errors.New("no file locks on this filesystem")
)

// tryLock takes f's flock, exclusive or shared, without waiting:
// errWouldBlock when another open file holds a conflicting one, errNoLocks
// when the filesystem has none.
func tryLock(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.ENOLCK, err == syscall.EOPNOTSUPP, err == syscall.ENOSYS:
			return errNoLocks
		}
		return err
	}
}

func unlock(f *os.File) { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// alive reports whether a process with this pid runs on this host.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
