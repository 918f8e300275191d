//go:build linux || darwin || freebsd || netbsd || openbsd

package local

import (
	"syscall"
	"time"
)

// preciseSleep blocks the calling thread for d in nanosleep.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // EINTR: the caller's loop sleeps the rest
}
