package proctime

import (
	"runtime"
	"testing"
	"time"
)

// CPU grows while the process computes (on Unix, where it is measured).
func TestCPUGrows(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skip("not measured here")
	}
	before := CPU()
	x := 1.0
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		x = x*1.0000001 + 1e-9
	}
	if after := CPU(); after <= before || x == 0 {
		t.Fatalf("CPU time %v then %v after 50 ms of work", before, after)
	}
}
