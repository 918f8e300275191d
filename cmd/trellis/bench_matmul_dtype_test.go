package main

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestBenchMatmulDType runs `bench matmul` on a small product in each
// dtype (layouts spread over them: each run also measures a 0.2 s peak),
// checks what it reports, and that an unknown dtype is refused by name.
func TestBenchMatmulDType(t *testing.T) {
	for _, c := range []struct{ dt, layout string }{{"fp32", "nn"}, {"bf16", "nt"}, {"bf16", "tn"}, {"fp16", "tn"}} {
		cfg := benchMatmulConfig{M: 13, K: 9, N: 35, Layout: c.layout, Threads: 1, ISA: "auto", DType: c.dt, Duration: time.Millisecond}
		res, err := runBenchMatmul(cfg)
		if err != nil {
			t.Fatalf("%s %s: %v", c.dt, c.layout, err)
		}
		if res.DType != c.dt || !(res.GFLOPS > 0) {
			t.Fatalf("%s %s: reported dtype %q, %g GFLOP/s", c.dt, c.layout, res.DType, res.GFLOPS)
		}
		widened := c.dt == "fp16" || c.dt == "bf16" && res.ISA != "avx512bf16"
		if strings.HasSuffix(res.ISA, "+widen") != widened {
			t.Fatalf("%s %s: isa %q", c.dt, c.layout, res.ISA)
		}
	}
	cfg := benchMatmulConfig{M: 1, K: 1, N: 1, Layout: "nn", DType: "fp8", Duration: time.Millisecond}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `dtype "fp8"`) {
		t.Fatalf("dtype fp8: error %v, want one naming it", err)
	}
}

// TestBenchMatmulPeakOnCores: with more threads than CPUs the matmul runs
// on every thread but the peak is measured on one goroutine per CPU (the
// peak loop's work grows with its goroutines: 1000 of them on two cores
// took a minute), and the report says on how many.
func TestBenchMatmulPeakOnCores(t *testing.T) {
	threads := 4 * runtime.NumCPU()
	cfg := benchMatmulConfig{M: 13, K: 9, N: 35, Layout: "nn", Threads: threads, ISA: "auto", DType: "fp32", Duration: time.Millisecond}
	res, err := runBenchMatmul(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Threads != threads || res.PeakThreads != runtime.NumCPU() || !(res.PeakGFLOPS > 0) {
		t.Fatalf("threads %d, peak %g GFLOP/s on %d; want %d threads, the peak on %d", res.Threads, res.PeakGFLOPS, res.PeakThreads, threads, runtime.NumCPU())
	}
	var b strings.Builder
	if err := printMatmulResult(&b, res, false); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("on %d thread(s)", runtime.NumCPU()); !strings.Contains(b.String(), want) {
		t.Fatalf("report %q does not say %q", b.String(), want)
	}
}
