package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"trellis/device"
	"trellis/internal/checked"
	"trellis/internal/sysmem"
	"trellis/ops"
	"trellis/tensor"
	"trellis/train"
)

// benchMatmulConfig is what `trellis bench matmul` measures.
type benchMatmulConfig struct {
	M, K, N  int
	Layout   string
	Threads  int
	ISA      string
	DType    string // fp32, bf16 or fp16: the type of A and B (C is fp32)
	Duration time.Duration
	JSON     bool
}

// maxCoreGFLOPS bounds the fp32 rate of one core from above (the CPUs
// seen so far peak near 210 GFLOP/s per thread): a matmul that cannot
// finish within --time even at this rate is refused before it starts.
const maxCoreGFLOPS = 500

// Validate names the first bad flag and its rule: the dimensions, their
// products (A, B and C must fit in int64 elements and in this machine's
// memory) and one matmul's time, which must be possible within --time.
func (c benchMatmulConfig) Validate() error {
	switch {
	case c.M < 1 || c.K < 1 || c.N < 1:
		return fmt.Errorf("bench matmul: --m=%d --k=%d --n=%d must all be >= 1", c.M, c.K, c.N)
	case c.Threads < 0 || c.Threads > train.MaxThreads:
		return fmt.Errorf("bench matmul: --threads=%d must be in [0, %d] (0: all CPUs)", c.Threads, train.MaxThreads)
	case c.Duration <= 0:
		return fmt.Errorf("bench matmul: --time=%v must be > 0", c.Duration)
	}
	if _, err := ops.ParseLayout(c.Layout); err != nil {
		return fmt.Errorf("bench matmul: --layout: %w", err)
	}
	m, k, n := int64(c.M), int64(c.K), int64(c.N)
	mk, ok1 := checked.Mul(m, k)
	kn, ok2 := checked.Mul(k, n)
	mn, ok3 := checked.Mul(m, n)
	elems, ok4 := checked.Add(mk, kn)
	elems, ok5 := checked.Add(elems, mn)
	bytes, ok6 := checked.Mul(elems, 4)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return fmt.Errorf("bench matmul: --m=%d --k=%d --n=%d: the operands' size (m·k + k·n + m·n floats) %v", c.M, c.K, c.N, checked.ErrOverflow)
	}
	if phys, ok := sysmem.Physical(); ok && bytes > phys {
		return fmt.Errorf("bench matmul: --m=%d --k=%d --n=%d: the operands need %s, more than this machine's memory, %s",
			c.M, c.K, c.N, device.FormatBytes(bytes), device.FormatBytes(phys))
	}
	threads := c.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	cores := float64(min(threads, runtime.NumCPU()))
	if least := 2 * float64(m) * float64(n) * float64(k) / (maxCoreGFLOPS * 1e9 * cores); least > c.Duration.Seconds() {
		return fmt.Errorf("bench matmul: one %dx%dx%d matmul takes at least %.3gs on %g core(s), longer than --time=%v: lower --m/--k/--n or raise --time",
			c.M, c.K, c.N, least, cores, c.Duration)
	}
	if _, err := tensor.ParseDType(c.DType); err != nil {
		return fmt.Errorf("bench matmul: dtype: %w", err)
	}
	return nil
}

// matmulResult is the --json output.
type matmulResult struct {
	GFLOPS     float64 `json:"gflops"`      // median over repeats of 2·m·n·k / seconds
	BestGFLOPS float64 `json:"best_gflops"` // the fastest repeat (others share this CPU)
	PeakGFLOPS float64 `json:"peak_gflops"` // FMA loop of the same ISA on PeakThreads goroutines
	// PeakThreads is min(threads, CPUs): more goroutines than cores reach
	// no higher rate, and the peak loop's work grows with the goroutine
	// count (1000 threads on two cores took a minute, whatever --time said).
	PeakThreads int     `json:"peak_threads"`
	ISA         string  `json:"isa"`
	DType       string  `json:"dtype"`
	Threads     int     `json:"threads"`
	M           int     `json:"m"`
	K           int     `json:"k"`
	N           int     `json:"n"`
	Layout      string  `json:"layout"`
	Seconds     float64 `json:"seconds"` // median seconds of one matmul
	Repeats     int     `json:"repeats"`
}

func newBenchMatmulCmd() *cobra.Command {
	cfg := benchMatmulConfig{M: 1024, K: 768, N: 3072, Layout: "nn", Threads: 1, ISA: "auto", DType: "fp32", Duration: 3 * time.Second}
	c := &cobra.Command{
		Use:   "matmul",
		Short: "Measure matmul GFLOP/s against this CPU's FMA peak",
		Long: `Measure C(M,N) = op(A)·op(B) with the ops kernels: nn is A(M,K)·B(K,N),
nt is A(M,K)·B(N,K)ᵀ, tn is A(K,M)ᵀ·B(K,N). Repeats run for about --time;
the median rate is reported with the FMA-loop peak of the same ISA and
thread count, measured by this binary.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := runBenchMatmul(cfg)
			if err != nil {
				return err
			}
			return printMatmulResult(cmd.OutOrStdout(), res, cfg.JSON)
		},
	}
	f := c.Flags()
	f.IntVar(&cfg.M, "m", cfg.M, "rows of C")
	f.IntVar(&cfg.K, "k", cfg.K, "inner dimension")
	f.IntVar(&cfg.N, "n", cfg.N, "columns of C")
	f.StringVar(&cfg.Layout, "layout", cfg.Layout, "nn, nt or tn")
	f.IntVar(&cfg.Threads, "threads", cfg.Threads, fmt.Sprintf("goroutines, at most %d (0: all CPUs)", train.MaxThreads))
	f.StringVar(&cfg.ISA, "isa", cfg.ISA, "auto, avx512, avx2 or generic")
	f.StringVar(&cfg.DType, "dtype", cfg.DType, "fp32, bf16 or fp16: A and B (C and the sums are fp32); bf16 runs VDPBF16PS where the CPU has AVX512_BF16, fp16 widens to fp32")
	f.DurationVar(&cfg.Duration, "time", cfg.Duration, "how long to repeat the matmul")
	f.BoolVar(&cfg.JSON, "json", false, `print {"gflops":..,"peak_gflops":..,...}`)
	return c
}

// runBenchMatmul times repeats of at least 50 ms (several matmuls each
// when one is shorter) until cfg.Duration has passed (at least one repeat;
// five when they fit in the time), then measures the FMA peak.
func runBenchMatmul(cfg benchMatmulConfig) (matmulResult, error) {
	if err := cfg.Validate(); err != nil {
		return matmulResult{}, err
	}
	l, _ := ops.ParseLayout(cfg.Layout)
	k, err := ops.New(ops.Config{Threads: cfg.Threads, ISA: cfg.ISA})
	if err != nil {
		return matmulResult{}, fmt.Errorf("bench matmul: %w", err)
	}
	m, kk, n := cfg.M, cfg.K, cfg.N
	lda, ldb := kk, n
	switch l {
	case ops.NT:
		ldb = kk
	case ops.TN:
		lda = m
	}
	r := rand.New(rand.NewPCG(1, 2))
	a, b, c := randFloats(r, m*kk), randFloats(r, kk*n), make([]float32, m*n)
	call, isa := matmulCall(k, cfg.DType, l, m, n, kk, a, lda, b, ldb, c)
	pk, err := ops.New(ops.Config{Threads: min(k.Threads(), runtime.NumCPU()), ISA: cfg.ISA})
	if err != nil {
		return matmulResult{}, fmt.Errorf("bench matmul: %w", err)
	}

	start := time.Now()
	call() // warm up: page in, fill the buffer pools
	one := max(time.Since(start), time.Microsecond)
	per := max(1, int(50*time.Millisecond/one))
	// Five repeats at least, unless they would overrun --time.
	minRepeats := 5
	if time.Duration(5*per)*one > cfg.Duration {
		minRepeats = 1
	}
	var secs []float64
	for begin := time.Now(); len(secs) < minRepeats || time.Since(begin) < cfg.Duration; {
		t0 := time.Now()
		for i := 0; i < per; i++ {
			call()
		}
		secs = append(secs, time.Since(t0).Seconds()/float64(per))
	}
	sort.Float64s(secs)
	med := secs[len(secs)/2]
	return matmulResult{
		GFLOPS:     2 * float64(m) * float64(n) * float64(kk) / med / 1e9,
		BestGFLOPS: 2 * float64(m) * float64(n) * float64(kk) / secs[0] / 1e9,
		PeakGFLOPS: peakOf(pk, cfg.DType)(max(cfg.Duration/4, 200*time.Millisecond)), PeakThreads: pk.Threads(),
		ISA: isa, DType: cfg.DType, Threads: k.Threads(), M: m, K: kk, N: n, Layout: l.String(),
		Seconds: med, Repeats: len(secs),
	}, nil
}

// matmulCall returns one matmul of the given dtype (fp32 operands a, b
// rounded to it) and the kernels that run it.
func matmulCall(k *ops.Kernels, dtype string, l ops.Layout, m, n, kk int, a []float32, lda int, b []float32, ldb int, c []float32) (func(), string) {
	dt, _ := tensor.ParseDType(dtype)
	switch dt {
	case tensor.BF16:
		a16, b16 := convertSlice(a, tensor.ToBF16), convertSlice(b, tensor.ToBF16)
		return func() { k.MatMulBF16(l, m, n, kk, a16, lda, b16, ldb, c, n, false) }, k.BF16ISA()
	case tensor.F16:
		a16, b16 := convertSlice(a, tensor.ToF16), convertSlice(b, tensor.ToF16)
		return func() { k.MatMulF16(l, m, n, kk, a16, lda, b16, ldb, c, n, false) }, k.ISA() + "+widen"
	}
	return func() { k.MatMul(l, m, n, kk, a, lda, b, ldb, c, n, false) }, k.ISA()
}

// peakOf is the peak measurement of k for a matmul of dtype: the bf16
// dot-product loop for bf16, else the fp32 FMA loop (fp16 widens to fp32).
func peakOf(k *ops.Kernels, dtype string) func(time.Duration) float64 {
	if dt, _ := tensor.ParseDType(dtype); dt == tensor.BF16 {
		return k.PeakGFLOPSBF16
	}
	return k.PeakGFLOPS
}

// peakLoop names the loop the peak of isa is measured with.
func peakLoop(isa string) string {
	if isa == "avx512bf16" {
		return "VDPBF16PS"
	}
	return "FMA"
}

func convertSlice[E any](s []float32, f func(float32) E) []E {
	out := make([]E, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}

func randFloats(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 2*r.Float32() - 1
	}
	return s
}

func printMatmulResult(w io.Writer, res matmulResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(res)
	}
	_, err := fmt.Fprintf(w, "matmul %s %s m=%d k=%d n=%d, %s, %d thread(s): %.1f GFLOP/s (median of %d, %.3g ms each; best %.1f); %s peak %.1f GFLOP/s on %d thread(s) (median %.0f%% of it)\n",
		res.Layout, res.DType, res.M, res.K, res.N, res.ISA, res.Threads, res.GFLOPS, res.Repeats, res.Seconds*1e3, res.BestGFLOPS, peakLoop(res.ISA), res.PeakGFLOPS, res.PeakThreads, 100*res.GFLOPS/res.PeakGFLOPS)
	return err
}
