//go:build !unix

package train

import "time"

// cpuTime is not measured off Unix: BenchmarkHalfParallel reports 0 ms.
func cpuTime() time.Duration { return 0 }
