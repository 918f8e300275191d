package ops

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"trellis/tensor"
)

// halfImpl is one way of running 16-bit matmuls under test: the Kernels
// and whether bf16 goes through pairs (VDPBF16PS or its Go model).
type halfImpl struct {
	name string
	k    *Kernels
}

// halfImpls returns the VDPBF16PS kernels where the CPU has them, the Go
// model of them (pairsGenericImpl, so the pair packing is tested on every
// CPU), each with its real blocking and a tiny one (odd kc: a pass ends
// inside a pair), and every fp32 impl for the widening path.
func halfImpls() []halfImpl {
	var pairs []*gemmImpl
	for _, g := range archImpls() {
		if bf, _ := bf16Impl(g); bf != nil {
			pairs = append(pairs, bf)
		}
	}
	pairs = append(pairs, pairsGenericImpl())
	var out []halfImpl
	for _, bf := range pairs {
		bf.minFlops = 0
		tiny := *bf
		tiny.name += "/tiny"
		tiny.kc, tiny.mc, tiny.nc = 5, 2*bf.mr, 2*bf.nr
		for _, g := range []*gemmImpl{bf, &tiny} {
			k := newTestKernels(genericImpl(), 3)
			k.bf, k.bfBufs = g, newGemmBuffers(g)
			out = append(out, halfImpl{g.name, k})
		}
	}
	for _, g := range append(archImpls(), genericImpl()) {
		g.minFlops = 0
		out = append(out, halfImpl{g.name + "+widen", newTestKernels(g, 3)})
	}
	return out
}

// pairsGenericImpl is a pure-Go model of the VDPBF16PS kernels (2×4 tiles
// over packed bf16 pairs), for tests.
func pairsGenericImpl() *gemmImpl {
	return &gemmImpl{name: "pairs-go", mr: 2, nr: 4, kc: 64, mc: 64, nc: 64,
		kernels: []microKernel{2: gemmPairsGo2x4}, pack: packer{copy: packCopy, transpose: packTranspose},
		peak: fmaLoopGeneric, peakFlops: 16}
}

// gemmPairsGo2x4 does what VDPBF16PS does per lane, the high product then
// the low one added to the fp32 sum, on 2×4 tiles of packed pairs.
func gemmPairsGo2x4(kc int, pa *float32, sa int, pb *float32, sb int, pc *float32, ldc int, _ int, src, bias *float32) {
	a := unsafe.Slice((*uint32)(unsafe.Pointer(pa)), max(kc-1, 0)*sa+2)
	b := unsafe.Slice((*uint32)(unsafe.Pointer(pb)), max(kc-1, 0)*sb+4)
	lo := func(d uint32) float32 { return math.Float32frombits(d << 16) }
	hi := func(d uint32) float32 { return math.Float32frombits(d &^ 0xffff) }
	var acc [2][4]float32
	for p := 0; p < kc; p++ {
		for i := range 2 {
			for j := range 4 {
				x, y := a[p*sa+i], b[p*sb+j]
				acc[i][j] += hi(x) * hi(y)
				acc[i][j] += lo(x) * lo(y)
			}
		}
	}
	c := unsafe.Slice(pc, ldc+4)
	var s, bs []float32
	if src != nil {
		s = unsafe.Slice(src, ldc+4)
	}
	if bias != nil {
		bs = unsafe.Slice(bias, 4)
	}
	storeRow4(c[0:4:4], rowOf(s, 0), bs, acc[0][0], acc[0][1], acc[0][2], acc[0][3])
	storeRow4(c[ldc:ldc+4:ldc+4], rowOf(s, ldc), bs, acc[1][0], acc[1][1], acc[1][2], acc[1][3])
}

// TestMatMulHalf holds MatMulBF16 and MatMulF16, on every halfImpl ×
// layout × shape × stride × accumulate, to the fp32 reference matmulRef
// on the same (16-bit-rounded) values, within the bound of TestMatMul:
// 2·k·ε·(Σ|a·b| + |C|), the products being exact on both sides.
func TestMatMulHalf(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, hi := range halfImpls() {
		for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
			if dt == tensor.F16 && hi.k.bf != nil {
				continue // fp16 never runs the pair kernels
			}
			for _, l := range []Layout{NN, NT, TN} {
				for _, s := range mmShapes {
					for _, pad := range []int{0, 3} {
						for _, acc := range []bool{false, true} {
							name := fmt.Sprintf("%s/%v/%v/%dx%dx%d/pad%d/acc=%v", hi.name, dt, l, s.m, s.n, s.k, pad, acc)
							checkMatMulHalf(t, name, r, hi.k, dt, l, s, pad, acc)
						}
					}
				}
			}
		}
	}
}

func checkMatMulHalf(t *testing.T, name string, r *rand.Rand, k *Kernels, dt tensor.DType, l Layout, s mmShape, pad int, acc bool) {
	t.Helper()
	a, lda, b, ldb := operands(r, l, s.m, s.n, s.k, pad)
	a16, b16 := roundHalf(dt, a), roundHalf(dt, b) // a, b now hold the rounded values
	ldc := s.n + pad
	c := randSlice(r, max(s.m*ldc, 1))
	want := append([]float32(nil), c...)
	if !acc {
		for i := range c {
			c[i] = float32(math.NaN()) // C must not be read
		}
	}
	matmulRef(l, s.m, s.n, s.k, a, lda, b, ldb, want, ldc, acc)
	if dt == tensor.BF16 {
		k.MatMulBF16(l, s.m, s.n, s.k, a16.([]tensor.BF16Bits), lda, b16.([]tensor.BF16Bits), ldb, c, ldc, acc)
	} else {
		k.MatMulF16(l, s.m, s.n, s.k, a16.([]tensor.F16Bits), lda, b16.([]tensor.F16Bits), ldb, c, ldc, acc)
	}
	const eps = 1.0 / (1 << 24)
	for i := 0; i < s.m; i++ {
		for j := 0; j < s.n; j++ {
			got, w := c[i*ldc+j], want[i*ldc+j]
			tol := 2*float64(s.k)*eps*(absBound(l, i, j, s.k, a, lda, b, ldb)+math.Abs(float64(w))) + 1e-30
			if d := math.Abs(float64(got) - float64(w)); !(d <= tol) {
				t.Fatalf("%s: C[%d,%d] = %g, want %g (|diff| %g > tol %g)", name, i, j, got, w, d, tol)
			}
		}
		for j := s.n; j < ldc && i*ldc+j < len(c); j++ { // padding untouched
			if got, w := c[i*ldc+j], want[i*ldc+j]; got != w && !(acc == false && math.IsNaN(float64(got))) {
				t.Fatalf("%s: padding C[%d,%d] changed to %g", name, i, j, got)
			}
		}
	}
}

// roundHalf rounds x in place to dt (bf16 or fp16) and returns the bits,
// a []tensor.BF16Bits or []tensor.F16Bits.
func roundHalf(dt tensor.DType, x []float32) any {
	if dt == tensor.BF16 {
		out := make([]tensor.BF16Bits, len(x))
		for i, v := range x {
			out[i] = tensor.ToBF16(v)
			x[i] = out[i].Float32()
		}
		return out
	}
	out := make([]tensor.F16Bits, len(x))
	for i, v := range x {
		out[i] = tensor.ToF16(v)
		x[i] = out[i].Float32()
	}
	return out
}

// TestMatMulBF16Fallback checks the paths a CPU without AVX512_BF16 takes:
// isa generic (and TRELLIS_KERNELS=generic) widen to fp32, say so in
// BF16ISA, and give the product; on this CPU, auto picks VDPBF16PS when it
// has AVX512_BF16.
func TestMatMulBF16Fallback(t *testing.T) {
	t.Setenv("TRELLIS_KERNELS", "generic")
	for _, cfg := range []Config{{Threads: 1, ISA: "generic"}, {Threads: 1}} {
		k, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := k.BF16ISA(); got != "generic+widen" {
			t.Fatalf("isa %q: BF16ISA() = %q, want generic+widen", cfg.ISA, got)
		}
		r := rand.New(rand.NewPCG(7, 8))
		checkMatMulHalf(t, "generic/"+cfg.ISA, r, k, tensor.BF16, NT, mmShape{13, 33, 71}, 1, false)
	}
	impls := archImpls()
	if len(impls) == 0 || impls[0].name != "avx512" {
		return
	}
	k, err := New(Config{Threads: 1, ISA: "avx512"})
	if err != nil {
		t.Fatal(err)
	}
	if bf, reason := bf16Impl(impls[0]); (bf != nil) != (k.BF16ISA() == "avx512bf16") {
		t.Fatalf("avx512: BF16ISA() = %q, but bf16Impl gives %v (%s)", k.BF16ISA(), bf != nil, reason)
	}
}

// countHandler counts the log records that reach it.
type countHandler struct{ n *int }

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(context.Context, slog.Record) error {
	*h.n++
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

// TestMatMulBF16NoticeOnce checks that bf16 on widening kernels says so
// once per Kernels, its Single copies included, and VDPBF16PS never.
func TestMatMulBF16NoticeOnce(t *testing.T) {
	var n int
	old := slog.Default()
	slog.SetDefault(slog.New(countHandler{&n}))
	defer slog.SetDefault(old)
	a, b, c := make([]tensor.BF16Bits, 6), make([]tensor.BF16Bits, 6), make([]float32, 4)
	k, err := New(Config{Threads: 2, ISA: "generic"})
	if err != nil {
		t.Fatal(err)
	}
	for _, kk := range []*Kernels{k, k, k.Single()} {
		kk.MatMulBF16(NN, 2, 2, 3, a, 3, b, 2, c, 2, false)
	}
	if n != 1 {
		t.Fatalf("generic: %d notices after three bf16 matmuls, want 1", n)
	}
	k2, err := New(Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	k2.MatMulBF16(NN, 2, 2, 3, a, 3, b, 2, c, 2, false)
	if want := map[bool]int{true: 1, false: 2}[k2.BF16ISA() == "avx512bf16"]; n != want {
		t.Fatalf("auto (%s): %d notices in all, want %d", k2.BF16ISA(), n, want)
	}
}
