package main

import (
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
