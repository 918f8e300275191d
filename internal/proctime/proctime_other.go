//go:build !unix

// Package proctime reads the CPU time this process has used, for
// benchmarks that report work done as well as wall time (on a shared
// machine the CPU time is the steadier of the two).
package proctime

import "time"

// CPU is not measured off Unix: 0.
func CPU() time.Duration { return 0 }
