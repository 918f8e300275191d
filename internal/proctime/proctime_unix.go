//go:build unix

// Package proctime reads the CPU time this process has used, for
// benchmarks that report work done as well as wall time (on a shared
// machine the CPU time is the steadier of the two).
package proctime

import (
	"syscall"
	"time"
)

// CPU is the user plus system CPU time of the process so far (0 if the
// system cannot say).
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
