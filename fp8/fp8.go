// Package fp8 emulates 8-bit floating-point GEMM operands exactly on the
// CPU: the OCP formats (tensor.E4M3, tensor.E5M2), power-of-two scales,
// the quantisation of a matrix by tiles, and delayed scaling's amax
// history. A quantised operand is handed to the GEMM as its dequantised
// values in bf16:
//
//	q = round_f(x·s)    (nearest even, saturating at ±max_f)
//	x̂ = q / s           (s a power of two: exact, and exactly a bf16)
//
// so the existing bf16 GEMM with fp32 accumulation multiplies exactly the
// values an fp8 tensor core multiplies (e4m3·e4m3 products are exact in
// fp32) and applies exactly the scales it applies (up to the fp32
// accumulation order, the only difference from a GPU's fp8 GEMM).
//
// The scale of an amax is
//
//	s = 2^⌊log2(max_f / amax)⌋ / 2^margin        (1 when amax is 0 or not finite)
//
// Transformer Engine's fp8_max / amax / 2^margin rounded down to a power
// of two (TE's power-of-two scaling option, MXFP8's E8M0 and DeepSeek's
// UE8M0 scales): at most one bit of range is given up, no finite amax
// overflows, and the dequantisation is exact.
package fp8

import (
	"math"

	"trellis/tensor"
)

// Format is an fp8 element format.
type Format uint8

// The two OCP formats.
const (
	E4M3 Format = iota // forward operands; gradients under the blockwise recipe
	E5M2               // gradients under delayed scaling (TE's HYBRID)
)

func (f Format) String() string {
	if f == E5M2 {
		return "e5m2"
	}
	return "e4m3"
}

// Max is the largest finite magnitude: 448 or 57344.
func (f Format) Max() float32 {
	if f == E5M2 {
		return tensor.E5M2Max
	}
	return tensor.E4M3Max
}

func (f Format) man() uint {
	if f == E5M2 {
		return 2
	}
	return 3
}

func (f Format) bias() int {
	if f == E5M2 {
		return 15
	}
	return 7
}

// Round is x's nearest value of f, ties to even, saturating at ±Max (NaN
// stays NaN): tensor's decode(encode(x)), computed on the fp32 bits.
func (f Format) Round(x float32) float32 {
	u := math.Float32bits(x)
	s := u & 0x80000000
	a := u &^ s
	switch {
	case a > 0x7f800000:
		return x
	case a >= math.Float32bits(f.Max()):
		return math.Float32frombits(s | math.Float32bits(f.Max()))
	case a < uint32(128-f.bias())<<23: // below the smallest normal 2^(1−bias): multiples of the subnormal step
		step := math.Ldexp(1, 1-f.bias()-int(f.man()))
		v := math.RoundToEven(float64(math.Float32frombits(a))/step) * step
		return math.Float32frombits(s | math.Float32bits(float32(v)))
	}
	shift := 23 - f.man()
	a += 1<<(shift-1) - 1 + (a>>shift)&1
	a &^= 1<<shift - 1
	return math.Float32frombits(s | a)
}

// Scale is the power-of-two scale for amax (see the package doc).
func Scale(f Format, amax float32, margin int) float32 {
	if !(amax > 0) || math.IsInf(float64(amax), 0) {
		return 1
	}
	_, e := math.Frexp(float64(f.Max()) / float64(amax)) // max/amax = fr·2^e, fr in [0.5, 1)
	return float32(math.Ldexp(1, min(max(e-1-margin, -100), 100)))
}

// Tile is the part of a row-major matrix one scale covers: R rows by C
// columns (DeepSeek-V3: 1×128 for an activation or gradient along the
// GEMM's reduction dimension, 128×1 when that dimension is its rows,
// 128×128 for a weight).
type Tile struct{ R, C int }

// Quantise sets dst (rows·cols bf16 bits) to the quantise-dequantise of
// the row-major rows×cols matrix src (fp32 or bf16) in format f: with
// scale > 0 one scale for every element (delayed scaling), else each
// tile's own Scale of its amax (margin 0). tmp holds at least
// TmpLen(cols) fp32s. It returns src's amax (+Inf if an element is NaN
// or infinite). dst may not alias src.
func Quantise(dst []uint16, src tensor.Buf, rows, cols int, tile Tile, f Format, scale float32, tmp []float32) float32 {
	tr, tc := max(1, min(tile.R, rows)), max(1, min(tile.C, cols))
	nt := (cols + tc - 1) / tc
	am, inv := tmp[:nt:nt], tmp[nt:2*nt:2*nt]
	r := newRounder(f)
	total := uint32(0)
	for r0 := 0; r0 < rows; r0 += tr {
		r1 := min(rows, r0+tr)
		clear(am)
		for i := r0; i < r1; i++ {
			if src.DType() == tensor.F32 {
				amax32(am, src.F32()[i*cols:(i+1)*cols], tc)
			} else {
				amax16(am, src.Bits()[i*cols:(i+1)*cols], tc)
			}
		}
		for t, a := range am {
			b := min(math.Float32bits(a), 0x7f800000) // NaN as Inf
			total = max(total, b)
			s := scale
			if !(s > 0) {
				s = Scale(f, math.Float32frombits(b), 0)
			}
			am[t], inv[t] = s, 1/s
		}
		for i := r0; i < r1; i++ {
			out := dst[i*cols : (i+1)*cols]
			if src.DType() == tensor.F32 {
				r.row32(out, src.F32()[i*cols:(i+1)*cols], am, inv, tc)
			} else {
				r.row16(out, src.Bits()[i*cols:(i+1)*cols], am, inv, tc)
			}
		}
	}
	return math.Float32frombits(total)
}

// amax32 folds |x| into the tiles' amaxes (as bits: the order of
// non-negative floats; NaN above +Inf).
func amax32(am []float32, x []float32, tc int) {
	if tc == 1 {
		for j, v := range x {
			am[j] = math.Float32frombits(max(math.Float32bits(am[j]), math.Float32bits(v)&^0x80000000))
		}
		return
	}
	for t := range am {
		a := math.Float32bits(am[t])
		for _, v := range x[t*tc : min(len(x), (t+1)*tc)] {
			a = max(a, math.Float32bits(v)&^0x80000000)
		}
		am[t] = math.Float32frombits(a)
	}
}

func amax16(am []float32, x []uint16, tc int) {
	if tc == 1 {
		for j, v := range x {
			am[j] = math.Float32frombits(max(math.Float32bits(am[j]), uint32(v&^0x8000)<<16))
		}
		return
	}
	for t := range am {
		a := uint16(math.Float32bits(am[t]) >> 16)
		for _, v := range x[t*tc : min(len(x), (t+1)*tc)] {
			a = max(a, v&^0x8000)
		}
		am[t] = math.Float32frombits(uint32(a) << 16)
	}
}

// rounder is Round on the bits for the normal range below Max (the
// mantissa rounded to nearest even by adding half an ulp and the kept
// bit's parity, as tensor.ToBF16 does), Round itself for the rest.
type rounder struct {
	f                      Format
	lo, hi, shift, half, m uint32
}

func newRounder(f Format) rounder {
	sh := uint32(23 - f.man())
	return rounder{f: f, lo: uint32(128-f.bias()) << 23, hi: math.Float32bits(f.Max()), shift: sh, half: 1<<(sh-1) - 1, m: ^(1<<sh - 1)}
}

// slow is the dequantised bf16 of Round(y)·inv.
func (r *rounder) slow(y, inv float32) uint16 {
	return uint16(math.Float32bits(r.f.Round(y)*inv) >> 16)
}

// run sets o to the dequantised bf16 of x·s (x fp32), scale s, inverse inv.
func (r *rounder) run(o []uint16, x []float32, s, inv float32) {
	lo, span, sh, half, m := r.lo, r.hi-r.lo, r.shift, r.half, r.m
	o = o[:len(x)]
	for j, v := range x {
		y := v * s
		u := math.Float32bits(y)
		a := u &^ 0x80000000
		if a-lo < span {
			a = (a + half + (a>>sh)&1) & m
			o[j] = uint16(math.Float32bits(math.Float32frombits(a|u&0x80000000)*inv) >> 16)
		} else {
			o[j] = r.slow(y, inv)
		}
	}
}

// run16 is run on bf16 x.
func (r *rounder) run16(o []uint16, x []uint16, s, inv float32) {
	lo, span, sh, half, m := r.lo, r.hi-r.lo, r.shift, r.half, r.m
	o = o[:len(x)]
	for j, v := range x {
		y := math.Float32frombits(uint32(v)<<16) * s
		u := math.Float32bits(y)
		a := u &^ 0x80000000
		if a-lo < span {
			a = (a + half + (a>>sh)&1) & m
			o[j] = uint16(math.Float32bits(math.Float32frombits(a|u&0x80000000)*inv) >> 16)
		} else {
			o[j] = r.slow(y, inv)
		}
	}
}

// row16c1 is run16 with a scale per column (128×1 tiles).
func (r *rounder) row16c1(o []uint16, x []uint16, s, inv []float32) {
	lo, span, sh, half, m := r.lo, r.hi-r.lo, r.shift, r.half, r.m
	o, s, inv = o[:len(x)], s[:len(x)], inv[:len(x)]
	for j, v := range x {
		y := math.Float32frombits(uint32(v)<<16) * s[j]
		u := math.Float32bits(y)
		a := u &^ 0x80000000
		if a-lo < span {
			a = (a + half + (a>>sh)&1) & m
			o[j] = uint16(math.Float32bits(math.Float32frombits(a|u&0x80000000)*inv[j]) >> 16)
		} else {
			o[j] = r.slow(y, inv[j])
		}
	}
}

func (r *rounder) row32(out []uint16, x []float32, s, inv []float32, tc int) {
	for t := range s {
		lo, hi := t*tc, min(len(x), (t+1)*tc)
		r.run(out[lo:hi], x[lo:hi], s[t], inv[t])
	}
}

func (r *rounder) row16(out []uint16, x []uint16, s, inv []float32, tc int) {
	if tc == 1 {
		r.row16c1(out, x, s, inv)
		return
	}
	for t := range s {
		lo, hi := t*tc, min(len(x), (t+1)*tc)
		r.run16(out[lo:hi], x[lo:hi], s[t], inv[t])
	}
}

// AMax is the largest magnitude of src's first n elements (NaN if one is
// NaN).
func AMax(src tensor.Buf, n int) float32 {
	a := float32(0)
	if src.DType() == tensor.F32 {
		for _, v := range src.F32()[:n] {
			a = max(a, abs32(v))
		}
		return a
	}
	for _, b := range src.Bits()[:n] {
		a = max(a, abs32(math.Float32frombits(uint32(b)<<16)))
	}
	return a
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ 0x80000000) }

// TmpLen is the fp32 scratch Quantise needs for a matrix of cols
// columns: each tile's scale and its inverse.
func TmpLen(cols int) int { return 2 * cols }
