package ops

import (
	"log/slog"
	"math"
	"sync"
	"time"
	"unsafe"

	"trellis/tensor"
)

// 16-bit matmuls: A and B in bf16 or fp16, C in fp32, every product and
// sum in fp32. They run on the fp32 GEMM's driver (gemm_driver.go), which
// packs the 16-bit operands one of two ways:
//
//   - bf16 pairs, where the CPU has AVX512_BF16: pairs of k packed into
//     dwords, (op(A)[i,2p], op(A)[i,2p+1]) and (op(B)[2p,j], op(B)[2p+1,j]),
//     low half first, for the VDPBF16PS micro-kernels (gemmBF16_*). Each
//     instruction forms 16 lanes × 2 exact bf16 products and adds them to
//     fp32 accumulators (denormal inputs and results flushed to zero, as
//     the instruction does). An odd K pads the last pair with a zero.
//   - fp32: the values widened exactly at packing, run by the fp32
//     micro-kernels of the Kernels' ISA. This is the path of fp16, always,
//     and of bf16 where the CPU lacks AVX512_BF16 or the ISA is forced
//     (avx2, generic). fp16 widens to fp32 rather than rounding to bf16
//     because bf16 keeps 8 of fp16's 11 significant bits: the fp16 product
//     would lose about 3 digits against what fp16 hardware computes (exact
//     fp16 products summed in fp32), while widening is exact and costs only
//     the fp32 kernels' speed.

// halfOperands are the 16-bit A and B of a MatMulBF16 or MatMulF16, as
// bits, and how they are packed.
type halfOperands struct {
	a, b     []uint16
	lda, ldb int
	f16      bool   // fp16 bits; bf16 otherwise
	pairs    bool   // bf16 pairs of k for VDPBF16PS; widened to fp32 otherwise
	pk       packer // the impl's fp32 packers: their transpose moves pairs as dwords
}

// MatMulBF16 is MatMul with A and B in bf16: C = op(A)·op(B) (accumulate
// false) or C += op(A)·op(B), with C fp32 and the same layouts, strides and
// panics as MatMul. Products are exact and sums in fp32; with AVX512_BF16
// it runs VDPBF16PS (see BF16ISA), otherwise the fp32 kernels on values
// widened at packing, and says so once per Kernels through log/slog.
func (k *Kernels) MatMulBF16(l Layout, m, n, kk int, a []tensor.BF16Bits, lda int, b []tensor.BF16Bits, ldb int, c []float32, ldc int, accumulate bool) {
	matmulCheck(l, m, n, kk, a, lda, b, ldb, c, ldc)
	if k.bf == nil && k.note != nil {
		k.note.once.Do(func() {
			slog.Info("ops: bf16 matmuls widen to fp32 at packing and run the fp32 kernels", "reason", k.note.reason)
		})
	}
	k.matMulHalf(l, m, n, kk, &halfOperands{a: bits16(a), lda: lda, b: bits16(b), ldb: ldb, pairs: k.bf != nil}, c, ldc, accumulate)
}

// MatMulF16 is MatMul with A and B in fp16 (IEEE binary16): the values
// are widened to fp32 at packing (exactly) and multiplied by the fp32
// micro-kernels; see the notes at the top of gemm_half.go.
func (k *Kernels) MatMulF16(l Layout, m, n, kk int, a []tensor.F16Bits, lda int, b []tensor.F16Bits, ldb int, c []float32, ldc int, accumulate bool) {
	matmulCheck(l, m, n, kk, a, lda, b, ldb, c, ldc)
	k.matMulHalf(l, m, n, kk, &halfOperands{a: bits16(a), lda: lda, b: bits16(b), ldb: ldb, f16: true}, c, ldc, accumulate)
}

// BF16ISA names what MatMulBF16 runs: "avx512bf16" (VDPBF16PS), or the
// fp32 ISA followed by "+widen".
func (k *Kernels) BF16ISA() string {
	if k.bf != nil {
		return k.bf.name
	}
	return k.impl.name + "+widen"
}

func (k *Kernels) matMulHalf(l Layout, m, n, kk int, h *halfOperands, c []float32, ldc int, accumulate bool) {
	var src []float32
	if accumulate {
		src = c
	}
	impl, bufs := k.impl, k.bufs
	if h.pairs {
		impl, bufs = k.bf, k.bfBufs
	}
	h.pk = impl.pack
	k.start(gemm{impl: impl, bufs: bufs, l: l, m: m, n: n, k: kk, c: c, ldc: ldc, src: src, h: h})
}

// bits16 views bf16 or fp16 values as their bits.
func bits16[E tensor.BF16Bits | tensor.F16Bits](s []E) []uint16 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&s[0])), len(s))
}

// halfNote says once per Kernels (and its Single copies) why bf16 matmuls
// widen to fp32.
type halfNote struct {
	once   sync.Once
	reason string
}

// packA packs rows [i0, i0+rows) and depth [p0, p0+kc) of op(A) into
// micro-panels of mr rows, as packABlock does for fp32 (pairs: kc/2
// rounded up dwords deep).
func (h *halfOperands) packA(l Layout, i0, rows, p0, kc int, dst []float32, mr int) {
	h.pack(h.a, h.lda, l != TN, i0, rows, p0, kc, dst, mr)
}

// packB packs depth [p0, p0+kc) and columns [j0, j0+cols) of op(B) into
// micro-panels of nr columns, as packBPanels does for fp32.
func (h *halfOperands) packB(l Layout, p0, kc, j0, cols int, dst []float32, nr int) {
	h.pack(h.b, h.ldb, l == NT, j0, cols, p0, kc, dst, nr)
}

// pack writes panels of w lanes from src, whose element (x, p) — x a row
// of op(A) or a column of op(B), p the depth — is src[x*ld+p] if xMajor
// and src[p*ld+x] otherwise, for x in [x0, x0+nx), p in [p0, p0+kc):
// panel q holds lanes x0+q·w … as dst[q·w·kd + s·w + lane] for depth
// step s < kd, lanes past nx zero. Widened, kd = kc and a step is one
// fp32; as pairs, kd = ⌈kc/2⌉ and a step is the dword (p = 2s, 2s+1).
func (h *halfOperands) pack(src []uint16, ld int, xMajor bool, x0, nx, p0, kc int, dst []float32, w int) {
	kd := kc
	if h.pairs {
		kd = (kc + 1) / 2
	}
	for q := 0; q*w < nx; q++ {
		n := min(w, nx-q*w)
		pan := dst[q*w*kd : (q+1)*w*kd]
		xs := x0 + q*w
		switch {
		case h.pairs && xMajor && ld%2 == 0 && p0%2 == 0 && kc%2 == 0 && uintptr(unsafe.Pointer(&src[0]))%4 == 0:
			// A row's pairs are its dwords: transpose them as fp32 bits.
			h.pk.transpose(unsafe.Slice((*float32)(unsafe.Pointer(&src[0])), len(src)/2), ld/2, xs, p0/2, n, kc/2, pan, w)
		case h.pairs && xMajor:
			pairsXMajor(src, ld, xs, n, p0, kc, pan, w)
		case h.pairs:
			pairsPMajor(src, ld, xs, n, p0, kc, pan, w)
		default:
			h.widen(src, ld, xMajor, xs, n, p0, kc, pan, w)
		}
		if n < w {
			for s := 0; s < kd; s++ {
				clear(pan[s*w+n : s*w+w])
			}
		}
	}
}

// widen is pack's fp32 panel of n lanes.
func (h *halfOperands) widen(src []uint16, ld int, xMajor bool, x0, n, p0, kc int, pan []float32, w int) {
	if !xMajor {
		for p := 0; p < kc; p++ {
			h.widenRow(pan[p*w:p*w+n], src[(p0+p)*ld+x0:(p0+p)*ld+x0+n])
		}
		return
	}
	var tmp [1024]float32 // a lane's row, widened, then scattered down the panel
	for x := 0; x < n; x++ {
		row := src[(x0+x)*ld+p0 : (x0+x)*ld+p0+kc]
		for c := 0; c < kc; c += len(tmp) {
			part := row[c:min(kc, c+len(tmp))]
			h.widenRow(tmp[:len(part)], part)
			for p, v := range tmp[:len(part)] {
				pan[(c+p)*w+x] = v
			}
		}
	}
}

// widenRow sets dst[i] = src[i] widened to fp32: 16 at a time in AVX-512
// (VCVTPH2PS for fp16), the rest in Go.
func (h *halfOperands) widenRow(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	i := 0
	if haveAVX512 && len(src) >= 16 {
		i = len(src) &^ 15
		if h.f16 {
			widenF16(&dst[0], &src[0], i)
		} else {
			widenBF16(&dst[0], &src[0], i)
		}
	}
	if h.f16 {
		for ; i < len(src); i++ {
			dst[i] = tensor.F16Bits(src[i]).Float32()
		}
		return
	}
	for ; i < len(src); i++ {
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
	}
}

// pairsXMajor is pack's bf16-pair panel of n lanes from an x-major source:
// a lane's pairs are the consecutive elements of its row.
func pairsXMajor(src []uint16, ld, x0, n, p0, kc int, pan []float32, w int) {
	d := dwords(pan)
	for x := 0; x < n; x++ {
		row := src[(x0+x)*ld+p0 : (x0+x)*ld+p0+kc]
		s := 0
		for ; 2*s+1 < kc; s++ {
			d[s*w+x] = uint32(row[2*s]) | uint32(row[2*s+1])<<16
		}
		if kc%2 == 1 {
			d[s*w+x] = uint32(row[kc-1])
		}
	}
}

// pairsPMajor is pack's bf16-pair panel of n lanes from a p-major source:
// step s interleaves rows p0+2s and p0+2s+1.
func pairsPMajor(src []uint16, ld, x0, n, p0, kc int, pan []float32, w int) {
	d := dwords(pan)
	s := 0
	if haveAVX512 && n == 32 && w == 32 && kc >= 2 {
		s = kc / 2
		_ = src[(p0+2*s-1)*ld+x0+31] // the asm stays inside src and pan
		_ = d[s*32-1]
		pairRows32(&src[p0*ld+x0], ld, &pan[0], s)
	}
	for ; 2*s < kc; s++ {
		r0 := src[(p0+2*s)*ld+x0 : (p0+2*s)*ld+x0+n]
		out := d[s*w : s*w+n]
		if 2*s+1 == kc {
			for x, v := range r0 {
				out[x] = uint32(v)
			}
			continue
		}
		r1 := src[(p0+2*s+1)*ld+x0 : (p0+2*s+1)*ld+x0+n]
		for x, v := range r0 {
			out[x] = uint32(v) | uint32(r1[x])<<16
		}
	}
}

// dwords views a packed panel as the dwords the bf16 kernels read.
func dwords(s []float32) []uint32 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&s[0])), len(s))
}

// PeakGFLOPSBF16 measures the peak of what MatMulBF16 runs, on
// k.Threads() goroutines for about d: a loop of independent VDPBF16PS
// (64 flops each: 16 lanes, 2 products, 2 flops per product), or the fp32
// FMA peak where bf16 widens to fp32.
func (k *Kernels) PeakGFLOPSBF16(d time.Duration) float64 {
	if k.bf != nil {
		return peakGFLOPS(k.bf, k.threads, d)
	}
	return k.PeakGFLOPS(d)
}
