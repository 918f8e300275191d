package ops

import (
	"fmt"
	"os"
	"runtime"
	"sync"
)

// Config selects how kernels run.
type Config struct {
	// Threads is the number of goroutines a kernel may use; 0 means
	// runtime.GOMAXPROCS(0).
	Threads int
	// ISA picks the matmul micro-kernels: "auto" (or ""), "avx512", "avx2" or
	// "generic" (pure Go). With "auto" the environment variable
	// TRELLIS_KERNELS, if set, takes its place; otherwise the best the CPU
	// supports is used.
	ISA string
}

// Validate checks the fields of cfg: Threads >= 0 and ISA one of the names
// above. Whether the CPU runs the ISA is checked by New.
func (cfg Config) Validate() error {
	if cfg.Threads < 0 {
		return fmt.Errorf("ops: threads=%d must be >= 0", cfg.Threads)
	}
	switch cfg.ISA {
	case "", "auto", "avx512", "avx2", "generic":
		return nil
	}
	return fmt.Errorf("ops: isa=%q is unknown (want auto, avx512, avx2 or generic)", cfg.ISA)
}

// Kernels runs kernels with a fixed thread count and ISA. It is safe for
// concurrent use.
type Kernels struct {
	threads int
	impl    *gemmImpl
	bufs    *gemmBuffers // shared with the Kernels Single returns
	// bf runs MatMulBF16 with VDPBF16PS; nil where the CPU lacks
	// AVX512_BF16 or the ISA is not avx512 (bf16 then widens to fp32).
	bf     *gemmImpl
	bfBufs *gemmBuffers
	note   *halfNote // why bf is nil, said once
}

// New checks cfg and returns the kernels for this CPU.
func New(cfg Config) (*Kernels, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := cfg.Threads
	if t == 0 {
		t = runtime.GOMAXPROCS(0)
	}
	isa := cfg.ISA
	if isa == "" || isa == "auto" {
		isa = os.Getenv("TRELLIS_KERNELS")
	}
	impl, err := resolveISA(isa)
	if err != nil {
		return nil, err
	}
	k := &Kernels{threads: t, impl: impl, bufs: newGemmBuffers(impl), note: &halfNote{}}
	k.bf, k.note.reason = bf16Impl(impl)
	if k.bf != nil {
		k.bfBufs = newGemmBuffers(k.bf)
	}
	return k, nil
}

// Threads is the number of goroutines a kernel may use.
func (k *Kernels) Threads() int { return k.threads }

// ISA names the matmul micro-kernels in use: "avx512", "avx2" or "generic".
func (k *Kernels) ISA() string { return k.impl.name }

// Single returns kernels of the same ISA that run on the calling goroutine
// only, for use inside Parallel. They share packing buffers with k.
func (k *Kernels) Single() *Kernels {
	if k.threads == 1 {
		return k
	}
	c := *k
	c.threads = 1
	return &c
}

// Parallel splits [0, n) into at most Threads contiguous chunks and runs fn on
// each, returning when all are done. With one thread (or n small) it runs
// inline.
func (k *Kernels) Parallel(n int, fn func(lo, hi int)) {
	parallel(k.threads, n, fn)
}

// parallel splits [0, n) into at most t contiguous chunks, runs fn on each
// (the last on the calling goroutine) and waits for all.
func parallel(t, n int, fn func(lo, hi int)) {
	if t > n {
		t = n
	}
	if t <= 1 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	var wg sync.WaitGroup
	for i := 0; i < t; i++ {
		lo, hi := i*n/t, (i+1)*n/t
		if i == t-1 {
			fn(lo, hi) // the caller's goroutine takes the last chunk
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}
