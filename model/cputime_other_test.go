//go:build !unix

package model

import "time"

// cpuTime is not measured off Unix: BenchmarkTrainStep reports 0 ms.
func cpuTime() time.Duration { return 0 }
