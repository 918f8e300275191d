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

// Kernels runs kernels with a fixed thread count and ISA. It is safe for
// concurrent use.
type Kernels struct {
	threads int
	isa     string
}

// New checks cfg and returns the kernels for this CPU.
func New(cfg Config) (*Kernels, error) {
	t := cfg.Threads
	if t == 0 {
		t = runtime.GOMAXPROCS(0)
	}
	if t < 0 {
		return nil, fmt.Errorf("ops: threads=%d must be >= 0", cfg.Threads)
	}
	isa := cfg.ISA
	if isa == "" || isa == "auto" {
		isa = os.Getenv("TRELLIS_KERNELS")
	}
	isa, err := resolveISA(isa)
	if err != nil {
		return nil, err
	}
	return &Kernels{threads: t, isa: isa}, nil
}

// Threads is the number of goroutines a kernel may use.
func (k *Kernels) Threads() int { return k.threads }

// ISA names the matmul micro-kernels in use.
func (k *Kernels) ISA() string { return k.isa }

// Single returns kernels of the same ISA that run on the calling goroutine
// only, for use inside Parallel.
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
	t := k.threads
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
