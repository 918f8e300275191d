package profile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"trellis/ops"
	"trellis/plan"
	"trellis/tensor"
)

// Config selects what Run measures and for how long.
type Config struct {
	Quick   bool   // fewer shapes and shorter timings (under 30 s; for CI)
	Threads int    // kernel threads of one rank, the planner's "device" (0: 1)
	ISA     string // kernel ISA ("" or "auto": the best this CPU has)
	// Ranks is the world size of the collective timings (0: the CPU count,
	// at least 2); Backends lists "local" (goroutine ranks in one process),
	// "shm" (processes over shared memory: what a launched job uses inside
	// a host) and "tcp" (processes over loopback: the [inter] link). The
	// first of local and shm listed is the [intra] link (WriteTOML).
	Ranks    int
	Backends []string
	// Procs fills in the worker program of a process backend's collective
	// benchmark (the CLI re-executes itself); required when Backends has
	// "shm" or "tcp".
	Procs func(CommConfig) CommConfig
	// Progress, if set, is told what is being measured.
	Progress func(stage string, done, total int)
}

func (c Config) threads() int { return max(c.Threads, 1) }

func (c Config) ranks() int {
	if c.Ranks > 0 {
		return c.Ranks
	}
	return max(2, runtime.NumCPU())
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Threads < 0 || c.Threads > 4096:
		return fmt.Errorf("profile: --threads=%d: want 0 (one) to 4096", c.Threads)
	case c.Ranks < 0 || c.Ranks == 1 || c.Ranks > 256:
		return fmt.Errorf("profile: --ranks=%d: want 0 (the CPU count) or 2 to 256", c.Ranks)
	}
	for _, b := range c.Backends {
		if b != "local" && b != "shm" && b != "tcp" {
			return fmt.Errorf("profile: --backends: unknown backend %q (want some of local, shm, tcp)", b)
		}
		if b != "local" && c.Procs == nil {
			return fmt.Errorf("profile: the %s backend needs a worker program (Config.Procs)", b)
		}
	}
	return nil
}

// timeIt returns the seconds of one call of f: the fastest of rounds of
// repeated calls lasting about budget in all (at least 5 rounds). The
// fastest round, not the median, is what the machine can do: on a shared
// host other processes only ever slow a round down, and a median taken
// while the load comes and goes mixes shapes timed at different loads
// (the GEMM fit's error went from 9% quiet to 67% at load 12).
func timeIt(ctx context.Context, budget time.Duration, f func()) (float64, error) {
	t0 := time.Now()
	f() // warm up: page in, fill buffer pools
	one := max(time.Since(t0), 100*time.Nanosecond)
	per := max(1, int(budget/10/one))
	best := 0.0
	for begin, n := time.Now(), 0; n < 5 || time.Since(begin) < budget; n++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		t := time.Now()
		for i := 0; i < per; i++ {
			f()
		}
		if sec := time.Since(t).Seconds() / float64(per); n == 0 || sec < best {
			best = sec
		}
	}
	return best, nil
}

func randSlice(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// gemmShapes are the products timed: the small dimension swept through
// the knee on each side, at the widths a transformer layer uses.
func gemmShapes(quick bool) []GEMMSample {
	ms := []int{8, 16, 32, 64, 128, 256, 512, 1024}
	if quick {
		ms = []int{8, 32, 128, 1024}
	}
	var out []GEMMSample
	for _, m := range ms {
		out = append(out, GEMMSample{M: m, N: 3072, K: 768}, GEMMSample{M: 1024, N: 768, K: m})
	}
	out = append(out, GEMMSample{M: 1024, N: 64, K: 1024}, GEMMSample{M: 1024, N: 768, K: 3072})
	// The layers of the small models a CPU host trains (h = 64..256, a
	// micro-batch of 128..512 tokens): QKV, MLP up and down, and the
	// weight gradients' T-long inner dimension.
	return append(out, GEMMSample{M: 256, N: 384, K: 128}, GEMMSample{M: 256, N: 512, K: 128}, GEMMSample{M: 256, N: 128, K: 512},
		GEMMSample{M: 128, N: 512, K: 256}, GEMMSample{M: 512, N: 768, K: 256})
}

// measureGEMMs times every shape (nn layout) on k, in gemmPasses passes
// over all the shapes, each shape's fastest round of any pass: a shape's
// rounds are spread over the whole measurement, so that another process
// slowing the core for a second (on this repository's 2-vCPU machine a
// quick profile once timed every shape 15–20% slow) does not slow every
// round of the shapes it overlaps.
func measureGEMMs(ctx context.Context, c Config, k *ops.Kernels, progress func(int, int)) ([]GEMMSample, error) {
	shapes := gemmShapes(c.Quick)
	budget := 150 * time.Millisecond
	if c.Quick {
		budget = 40 * time.Millisecond
	}
	r := rand.New(rand.NewPCG(1, 2))
	type operands struct{ a, b, out []float32 }
	ops_ := make([]operands, len(shapes))
	for i, s := range shapes {
		ops_[i] = operands{randSlice(r, s.M*s.K), randSlice(r, s.K*s.N), make([]float32, s.M*s.N)}
	}
	for pass := 0; pass < gemmPasses; pass++ {
		for i := range shapes {
			progress(pass*len(shapes)+i, gemmPasses*len(shapes))
			s, o := &shapes[i], ops_[i]
			sec, err := timeIt(ctx, budget/gemmPasses, func() { k.MatMul(ops.NN, s.M, s.N, s.K, o.a, s.K, o.b, s.N, o.out, s.N, false) })
			if err != nil {
				return nil, err
			}
			if pass == 0 || sec < s.Seconds {
				s.Seconds = sec
			}
		}
	}
	return shapes, nil
}

// gemmPasses is how many times measureGEMMs goes over the shapes.
const gemmPasses = 4

// AttnSample is the timed flash attention core of one (B·NH heads, T,
// head size) shape, forward and backward.
type AttnSample struct {
	B, T, C, NH   int
	Fwd, Bwd      float64 // seconds
	FlopsForward  float64 // the planner's count: 4·heads·T²·d·½ (causal)
	PlannerEffOut float64 // the attn_efficiency that makes the planner's time equal the measured one
}

// measureAttention is the flash kernels' timing at the profile's shape
// (4 heads of 64, T 1,024; quick: 256) — a point of the attention table,
// which timed it (measureAttnTable) — converted to the planner's
// attention efficiency: the planner costs the forward at F/(η·peak) and
// the backward at 2.5·F/(0.8·η·peak) (plan/compute.go), so
// η = F·(1 + 2.5/0.8) / (peak·(t_fwd + t_bwd)).
func measureAttention(c Config, t plan.AttnTable, peak float64) (AttnSample, error) {
	s := AttnSample{B: 1, T: 1024, C: 64 * attnHeads, NH: attnHeads}
	if c.Quick {
		s.T = 256
	}
	return tableSample(t, s, peak)
}

// tableSample is the flash kernels' timing at s's shape (B 1, attnHeads
// heads) read from the attention table, which timed it, with its
// efficiency; an error where the table lacks the shape.
func tableSample(t plan.AttnTable, s AttnSample, peak float64) (AttnSample, error) {
	i, j := slices.Index(t.Seq, s.T), slices.Index(t.Head, s.C/s.NH)
	if i < 0 || j < 0 {
		return s, fmt.Errorf("profile: the attention table (seq %v, head %v) lacks T=%d, head size %d", t.Seq, t.Head, s.T, s.C/s.NH)
	}
	n := causalScores(s.T)
	s.Fwd, s.Bwd = t.Cost[plan.AttnFlashFwd][i][j]*n, t.Cost[plan.AttnFlashBwd][i][j]*n
	return s.withEfficiency(peak), nil
}

// measureNarrowAttention is measureAttention's shape at head size 16
// (C 64 over 4 heads), where the kernels have a tiled path that head size
// 16 cannot take (ops.Kernels.FlashTiled): the blocked path's efficiency,
// which the planner uses for such head sizes (attn_narrow_efficiency),
// from the attention table's point there. nil where every head size runs
// the same path.
func measureNarrowAttention(k *ops.Kernels, t plan.AttnTable, peak float64, wide AttnSample) (*AttnSample, error) {
	if !k.FlashTiled(wide.C/wide.NH) || k.FlashTiled(16) {
		return nil, nil
	}
	s, err := tableSample(t, AttnSample{B: wide.B, T: wide.T, C: 16 * attnHeads, NH: attnHeads}, peak)
	return &s, err
}

// timeAttention times the flash kernels at s's shape.
func timeAttention(ctx context.Context, k *ops.Kernels, s AttnSample, budget time.Duration, peak float64) (AttnSample, error) {
	r := rand.New(rand.NewPCG(3, 4))
	B, T, C, NH := s.B, s.T, s.C, s.NH
	qkv, out, dout := randSlice(r, B*T*3*C), make([]float32, B*T*C), randSlice(r, B*T*C)
	lse, dqkv := make([]float32, B*NH*T), make([]float32, B*T*3*C)
	var err error
	if s.Fwd, err = timeIt(ctx, budget, func() { ops.FlashAttentionForward(k, out, lse, qkv, B, T, C, NH, NH) }); err != nil {
		return s, err
	}
	if s.Bwd, err = timeIt(ctx, budget, func() { ops.FlashAttentionBackward(k, dqkv, dout, qkv, out, lse, B, T, C, NH, NH) }); err != nil {
		return s, err
	}
	return s.withEfficiency(peak), nil
}

// withEfficiency is s with its planner FLOP count and the efficiency its
// timings give (measureAttention's η).
func (s AttnSample) withEfficiency(peak float64) AttnSample {
	s.FlopsForward = 4 * float64(s.B*s.NH) * float64(s.T) * float64(s.T) * float64(s.C/s.NH) * 0.5
	s.PlannerEffOut = s.FlopsForward * (1 + 2.5/0.8) / (peak * (s.Fwd + s.Bwd))
	return s
}

// MemSample is memory bandwidth as a copy reaches it and as Trellis's
// memory-bound kernels reach it, on buffers far larger than the caches.
type MemSample struct {
	CopyGBps float64 // copy(): read + write bytes per second
	// NormGBps, AddGBps and ActGBps are LayerNorm forward, a residual add
	// (read two, write one) and GELU forward: bytes read + written per
	// second, each the best of memRounds interleaved rounds.
	NormGBps, AddGBps, ActGBps float64
	// KernelGBps is the rate of a GPT layer's memory-bound forward as the
	// planner counts its bytes (plan.Job.elementwise): per token two norms
	// move 4h, two residual adds 6h and GELU 2f = 8h, so
	//
	//	18/KernelGBps = 4/NormGBps + 6/AddGBps + 8/ActGBps
	//
	// (the time of the mix, not its slowest kernel's rate: GELU's tanh
	// makes it the slowest by 1.5x on AVX-512, and pricing the adds and
	// norms at its rate made every memory-bound pass 1.5-2x too slow).
	KernelGBps float64
	// ConvertGBps is the engine's 16-bit conversion passes: rounding fp32
	// to bf16 (read 4, write 2 bytes an element) and widening it back
	// (read 2, write 4), 12 bytes over the two passes' time.
	ConvertGBps float64
	GapSeconds  float64 // a tiny kernel's time: the fixed cost per kernel call
}

// memRounds is how many interleaved rounds time each memory-bound kernel
// (the best counts: a quick profile whose two rounds both met a slow
// stretch of the shared host's memory once priced LayerNorm and the adds
// at half their rate).
const memRounds = 4

// A GPT layer's memory-bound bytes per token, in units of h: its norms',
// residual adds' and activation's (MemSample.KernelGBps).
const mixNorm, mixAdd, mixAct = 4.0, 6.0, 8.0

// mixGBps is the rate of the mix at the three kernels' rates.
func mixGBps(norm, add, act float64) float64 {
	return (mixNorm + mixAdd + mixAct) / (mixNorm/norm + mixAdd/add + mixAct/act)
}

func measureMemory(ctx context.Context, c Config, k *ops.Kernels) (MemSample, error) {
	var s MemSample
	N, C := 16384, 768 // 48 MiB per operand
	budget := 200 * time.Millisecond
	if c.Quick {
		N, budget = 8192, 50*time.Millisecond
	}
	r := rand.New(rand.NewPCG(5, 6))
	x, y, z := randSlice(r, N*C), make([]float32, N*C), randSlice(r, N*C)
	w, b := randSlice(r, C), randSlice(r, C)
	mean, rstd := make([]float32, N), make([]float32, N)
	bytes := float64(2 * 4 * N * C)
	sec, err := timeIt(ctx, budget, func() { copy(y, x) })
	if err != nil {
		return s, err
	}
	s.CopyGBps = bytes / sec / 1e9
	h := make([]tensor.BF16Bits, N*C)
	var enc, dec float64 // the conversions' rates: 6 bytes an element each
	kernels := []struct {
		f     func()
		bytes float64
		rate  *float64
	}{
		{func() { ops.LayerNormForward(k, y, mean, rstd, x, w, b, N, C) }, bytes, &s.NormGBps},
		{func() { ops.ResidualForward(k, y, x, z, N*C) }, 1.5 * bytes, &s.AddGBps},
		{func() { ops.GELUForward(k, y, x, N*C) }, bytes, &s.ActGBps},
		{func() { ops.EncodeBF16(k, h, x) }, 0.75 * bytes, &enc},
		{func() { ops.DecodeBF16(k, y, h) }, 0.75 * bytes, &dec},
	}
	for range memRounds { // interleaved, so that a slow second slows one round of each, not all of one
		for _, kn := range kernels {
			sec, err := timeIt(ctx, budget/2, kn.f)
			if err != nil {
				return s, err
			}
			*kn.rate = max(*kn.rate, kn.bytes/sec/1e9)
		}
	}
	s.KernelGBps = mixGBps(s.NormGBps, s.AddGBps, s.ActGBps)
	s.ConvertGBps = 2 / (1/enc + 1/dec) // 12 bytes over the two passes' time
	s.GapSeconds, err = timeIt(ctx, budget/4, func() { ops.LayerNormForward(k, y[:64], mean[:1], rstd[:1], x[:64], w[:64], b[:64], 1, 64) })
	return s, err
}
