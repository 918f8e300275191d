// Command avx2gen generates the AVX2+FMA assembly of package ops's
// element-wise kernels with avo: SwiGLU's forward and backward, RMSNorm's
// row sums and updates, and GELU's forward and backward (the AVX-512
// kernels' operations on 8 lanes, so the same bits) over n elements (n a
// multiple of 8; the Go wrappers in ops/swiglu.go, ops/rmsnorm.go and
// ops/vec.go do the tails). They are 256-bit and VEX-encoded, so they run on every CPU with
// AVX2 and FMA, AVX-512 ones included. Run it through `go generate ./ops`.
package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"trellis/internal/avxrow"
	"trellis/ops/internal/coef"
)

func main() {
	ConstraintExpr("amd64")
	swigluFwd()
	swigluBwd()
	rmsDot()
	rmsScale()
	rmsBwd()
	rmsParam()
	geluFwd()
	geluBwd("geluBwdAVX2", true)
	geluBwd("geluBwdSetAVX2", false)
	Generate()
}

// consts holds 32-byte blocks of one float32 in every lane, by value: AVX2
// has no broadcast memory operands, so a constant is read whole.
var consts = map[float32]Mem{}

// c is the 256-bit memory operand holding v in each of its 8 lanes.
func c(v float32) Mem {
	if m, ok := consts[v]; ok {
		return m
	}
	m := GLOBL(fmt.Sprintf("y%d", len(consts)), RODATA|NOPTR)
	for i := 0; i < 8; i++ {
		DATA(4*i, U32(math.Float32bits(v)))
	}
	consts[v] = m
	return m
}

func ptr(name string) reg.GPVirtual { return Load(Param(name), GP64()).(reg.GPVirtual) }

func mem(p reg.GPVirtual) Mem { return Mem{Base: p} }

func load(p reg.GPVirtual) reg.VecVirtual {
	y := YMM()
	VMOVUPS(mem(p), y)
	return y
}

// loop emits `for ; n > 0; n -= 8 { body(); ptrs += 32 }` with n the
// argument "n".
func loop(name string, ptrs []reg.GPVirtual, body func()) { avxrow.Counted(name, 8, ptrs, body) }

// exp emits e^t as ops.exp32 computes it — n = ⌊t·log₂e + ½⌋, r = t −
// n·ln2 (|r| ≤ ln2/2), a degree-7 polynomial for e^r, times 2ⁿ added to
// its exponent bits — for t clamped to [−87.3, 88] (so that 2ⁿ·e^r stays
// a normal float: e^88 ≈ 1.7e38); t is overwritten.
func exp(t reg.VecVirtual) reg.VecVirtual {
	VMAXPS(c(-87.3), t, t)
	VMINPS(c(88), t, t)
	n := YMM()
	VMOVUPS(c(1.44269504088896341), n)
	VFMADD213PS(c(0.5), t, n)             // n = t·log₂e + ½
	VROUNDPS(U8(1), n, n)                 // n = ⌊n⌋
	VFNMADD231PS(c(0.693359375), n, t)    // r = t − n·c1
	VFNMADD231PS(c(-2.12194440e-4), n, t) // r −= n·c2
	p := YMM()
	poly := coef.ExpPoly() // Cephes expf's, ops.exp32's
	VMOVUPS(c(poly[0]), p)
	for _, k := range poly[1:] {
		VFMADD213PS(c(k), t, p) // p = r·p + k
	}
	r2 := YMM()
	VMULPS(t, t, r2)
	VFMADD213PS(t, r2, p) // p = r²·p + r
	VADDPS(c(1), p, p)
	e := YMM()
	VCVTPS2DQ(n, e)      // n as int32 (exact: n is integral)
	VPSLLD(U8(23), e, e) // n << 23
	VPADDD(e, p, e)      // p·2ⁿ: add n to p's exponent (p in [½, 2): no overflow of the field for n in [−126, 127])
	return e
}

// sigmoid emits σ(g) = 1/(1 + e^(−g)) for g in a register (kept).
func sigmoid(g reg.VecVirtual) reg.VecVirtual {
	t := YMM()
	VXORPS(c(float32(math.Copysign(0, -1))), g, t) // t = −g
	e := exp(t)
	VADDPS(c(1), e, e)
	s := YMM()
	VMOVUPS(c(1), s)
	VDIVPS(e, s, s) // s = 1/(1 + e)
	return s
}

func swigluFwd() {
	TEXT("swigluFwdAVX2", NOSPLIT, "func(act, gate, up *float32, n int)")
	Pragma("noescape")
	Doc("swigluFwdAVX2 sets act[i] = g·σ(g)·up[i], g = gate[i], for i < n (n a multiple of 8).")
	pa, pg, pu := ptr("act"), ptr("gate"), ptr("up")
	loop("swigluFwd", []reg.GPVirtual{pa, pg, pu}, func() {
		g := load(pg)
		s := sigmoid(g)
		VMULPS(g, s, s)
		VMULPS(mem(pu), s, s)
		VMOVUPS(s, mem(pa))
	})
	VZEROUPPER()
	RET()
}

func swigluBwd() {
	TEXT("swigluBwdAVX2", NOSPLIT, "func(dg, du, gate, up, dact *float32, n int)")
	Pragma("noescape")
	Doc("swigluBwdAVX2 sets dg[i] = d·u·σ(g)·(1 + g·(1 − σ(g))) and du[i] = d·g·σ(g), d = dact[i], g = gate[i], u = up[i], for i < n (n a multiple of 8; dg may be gate and du up).")
	pdg, pdu, pg, pu, pd := ptr("dg"), ptr("du"), ptr("gate"), ptr("up"), ptr("dact")
	loop("swigluBwd", []reg.GPVirtual{pdg, pdu, pg, pu, pd}, func() {
		g, u, d := load(pg), load(pu), load(pd)
		s := sigmoid(g)
		a := YMM()
		VMOVUPS(c(1), a)
		VSUBPS(s, a, a)         // a = 1 − σ
		VFMADD213PS(c(1), g, a) // a = g·(1 − σ) + 1
		VMULPS(s, a, a)         // a = σ·(1 + g(1 − σ))
		VMULPS(u, a, a)
		VMULPS(d, a, a) // dg
		b := YMM()
		VMULPS(g, s, b)
		VMULPS(d, b, b) // du
		VMOVUPS(a, mem(pdg))
		VMOVUPS(b, mem(pdu))
	})
	VZEROUPPER()
	RET()
}

// param broadcasts a float32 argument to a ymm register from its stack slot.
func param(name string) reg.VecVirtual {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	y := YMM()
	VBROADCASTSS(b.Addr, y)
	return y
}

func zero() reg.VecVirtual {
	y := YMM()
	VXORPS(y, y, y)
	return y
}

// hsum stores the sum of a's 8 lanes, (a₀+a₄) + (a₁+a₅) + …, in a fixed
// order, as the float32 result.
func hsum(a reg.VecVirtual) {
	hi := XMM()
	VEXTRACTF128(U8(1), a, hi)
	lo := a.AsX()
	VADDPS(hi, lo, lo)
	VHADDPS(lo, lo, lo)
	VHADDPS(lo, lo, lo)
	Store(lo, ReturnIndex(0))
}

// sum2 emits, for two lane accumulators fed by body 8 elements at a time,
// their sum; body gets the accumulator of the step.
func sum2(name string, ptrs []reg.GPVirtual, body func(acc reg.VecVirtual)) {
	a0, a1 := zero(), zero()
	n := Load(Param("n"), GP64())
	TESTQ(n, n)
	JE(LabelRef(name + "_done"))
	Label(name + "_loop")
	body(a0)
	for _, p := range ptrs {
		ADDQ(U32(32), p)
	}
	SUBQ(U32(8), n)
	JE(LabelRef(name + "_done"))
	body(a1)
	for _, p := range ptrs {
		ADDQ(U32(32), p)
	}
	SUBQ(U32(8), n)
	JNE(LabelRef(name + "_loop"))
	Label(name + "_done")
	VADDPS(a1, a0, a0)
	hsum(a0)
}

func rmsDot() {
	TEXT("rmsDotAVX2", NOSPLIT, "func(w, dy, x *float32, n int) float32")
	Pragma("noescape")
	Doc("rmsDotAVX2 is Σ w[i]·dy[i]·x[i] for i < n (n a multiple of 8), in two 8-lane accumulators summed in a fixed order.")
	pw, pdy, px := ptr("w"), ptr("dy"), ptr("x")
	sum2("rmsDot", []reg.GPVirtual{pw, pdy, px}, func(acc reg.VecVirtual) {
		t := load(pw)
		VMULPS(mem(pdy), t, t)
		VFMADD231PS(mem(px), t, acc)
	})
	VZEROUPPER()
	RET()
}

func rmsScale() {
	TEXT("rmsScaleAVX2", NOSPLIT, "func(out, x, w *float32, n int, s float32)")
	Pragma("noescape")
	Doc("rmsScaleAVX2 sets out[i] = x[i]·s·w[i] for i < n (n a multiple of 8).")
	po, px, pw := ptr("out"), ptr("x"), ptr("w")
	sv := param("s")
	loop("rmsScale", []reg.GPVirtual{po, px, pw}, func() {
		x := load(px)
		VMULPS(sv, x, x)
		VMULPS(mem(pw), x, x)
		VMOVUPS(x, mem(po))
	})
	VZEROUPPER()
	RET()
}

func rmsBwd() {
	TEXT("rmsBwdAVX2", NOSPLIT, "func(dx, w, dy, x *float32, n int, s, c float32)")
	Pragma("noescape")
	Doc("rmsBwdAVX2 sets dx[i] += s·w[i]·dy[i] − c·x[i] for i < n (n a multiple of 8).")
	pdx, pw, pdy, px := ptr("dx"), ptr("w"), ptr("dy"), ptr("x")
	sv, cv := param("s"), param("c")
	loop("rmsBwd", []reg.GPVirtual{pdx, pw, pdy, px}, func() {
		t := load(pw)
		VMULPS(mem(pdy), t, t)
		VMULPS(sv, t, t) // t = s·w·dy
		x := load(px)
		VFNMADD231PS(cv, x, t) // t −= c·x
		VADDPS(mem(pdx), t, t)
		VMOVUPS(t, mem(pdx))
	})
	VZEROUPPER()
	RET()
}

func rmsParam() {
	TEXT("rmsParamAVX2", NOSPLIT, "func(dw, dy, x *float32, n int, s float32)")
	Pragma("noescape")
	Doc("rmsParamAVX2 sets dw[i] += dy[i]·(x[i]·s) for i < n (n a multiple of 8).")
	pg, pdy, px := ptr("dw"), ptr("dy"), ptr("x")
	sv := param("s")
	loop("rmsParam", []reg.GPVirtual{pg, pdy, px}, func() {
		x := load(px)
		VMULPS(sv, x, x)
		gv := load(pg)
		VFMADD231PS(mem(pdy), x, gv)
		VMOVUPS(gv, mem(pg))
	})
	VZEROUPPER()
	RET()
}

// reg32 is v in every lane of a register (VEX FMAs take a memory operand
// only in the last source).
func reg32(v float32) reg.VecVirtual {
	y := YMM()
	VMOVUPS(c(v), y)
	return y
}

// GELU's and tanh's constants, shared with ops/vecgen.
const (
	geluS     = coef.S
	geluK     = coef.K
	tanhClamp = coef.Clamp
)

// tanh emits x·P(x²)/Q(x²) for x = u clamped to ±7.905: the operations of
// ops/vecgen's AVX-512 tanh in the same order, so each lane's bits are
// the same.
func tanh(u reg.VecVirtual) reg.VecVirtual {
	x := YMM()
	VMINPS(c(tanhClamp), u, x)
	VMAXPS(c(-tanhClamp), x, x)
	x2 := YMM()
	VMULPS(x, x, x2)
	tanhP, tanhQ := coef.P(), coef.Q()
	p := reg32(tanhP[0])
	for _, k := range tanhP[1:] {
		VFMADD213PS(c(k), x2, p) // p = x²·p + k
	}
	VMULPS(x, p, p)
	q := reg32(tanhQ[0])
	for _, k := range tanhQ[1:] {
		VFMADD213PS(c(k), x2, q)
	}
	th := YMM()
	VDIVPS(q, p, th) // th = p/q
	return th
}

// geluParts returns x² and th = tanh(s·(x + k·x³)) for x in a register,
// as ops/vecgen's geluParts computes them.
func geluParts(x reg.VecVirtual) (x2, th reg.VecVirtual) {
	x2 = YMM()
	VMULPS(x, x, x2)
	t := YMM()
	VMOVAPS(x2, t)
	VFMADD213PS(c(geluS), reg32(geluS*geluK), t) // t = s·k·x² + s
	VMULPS(x, t, t)                              // u = x·t
	return x2, tanh(t)
}

func geluFwd() {
	TEXT("geluFwdAVX2", NOSPLIT, "func(out, x *float32, n int)")
	Pragma("noescape")
	Doc("geluFwdAVX2 sets out[i] = ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) for i < n (n a multiple of 8), lane for lane the bits of geluFwdAVX512.")
	po, px := ptr("out"), ptr("x")
	loop("geluFwd", []reg.GPVirtual{po, px}, func() {
		x := load(px)
		_, th := geluParts(x)
		hx := YMM()
		VMULPS(c(0.5), x, hx)
		VFMADD213PS(hx, hx, th) // th = hx·th + hx
		VMOVUPS(th, mem(po))
	})
	VZEROUPPER()
	RET()
}

// geluBwd emits dx (+)= dy·GELU'(x), as ops/vecgen's geluBackward.
func geluBwd(name string, accumulate bool) {
	TEXT(name, NOSPLIT, "func(dx, x, dy *float32, n int)")
	Pragma("noescape")
	if accumulate {
		Doc(name + " accumulates dx[i] += dy[i]·GELU'(x[i]) for i < n (n a multiple of 8), lane for lane the bits of geluBwdAVX512.")
	} else {
		Doc(name + " sets dx[i] = dy[i]·GELU'(x[i]) for i < n (n a multiple of 8), lane for lane the bits of geluBwdSetAVX512.")
	}
	pdx, px, pdy := ptr("dx"), ptr("x"), ptr("dy")
	loop(name, []reg.GPVirtual{pdx, px, pdy}, func() {
		x := load(px)
		x2, th := geluParts(x)
		a := YMM()
		VMOVAPS(th, a)
		VFNMADD213PS(c(1), th, a)                       // a = 1 − th²
		VFMADD213PS(c(geluS), reg32(3*geluS*geluK), x2) // x2 = 3sk·x² + s
		VMULPS(x2, a, a)
		hx := YMM()
		VMULPS(c(0.5), x, hx)
		VMULPS(hx, a, a)                    // a = ½x(1−th²)·s(1+3k·x²)
		VFMADD213PS(c(0.5), reg32(0.5), th) // th = ½·th + ½
		VADDPS(a, th, th)                   // th = GELU'(x)
		if accumulate {
			d := load(pdx)
			VFMADD231PS(mem(pdy), th, d) // d += th·dy
			VMOVUPS(d, mem(pdx))
		} else {
			VMULPS(mem(pdy), th, th)
			VMOVUPS(th, mem(pdx))
		}
	})
	VZEROUPPER()
	RET()
}
