//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package local

import "time"

// preciseSleep is time.Sleep where nanosleep is not available.
func preciseSleep(d time.Duration) { time.Sleep(d) }
