// Command vecgen generates the AVX-512 assembly of package ops's vector
// kernels with avo: GELU and axpy over n elements (n a multiple of 16; the
// Go wrappers in ops/vec.go do the tails), AdamW, and whole rows of
// softmax, its gradient and LayerNorm with masked tails (softmax.go,
// lnrows.go). Run it through `go generate ./ops`.
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
	hoisted = map[float32]reg.VecVirtual{}
	geluForward()
	geluBackward("geluBwdAVX512", true)
	geluBackward("geluBwdSetAVX512", false)
	axpy()
	adamw()
	softmaxRowK()
	expRowK()
	rowMaxK()
	softmaxGradRowK()
	softmaxCausalK()
	softmaxGradCausalK()
	flashExpTileK()
	flashGradTileK("flashGradTileAVX512", false)
	flashGradTileK("flashGradDotTileAVX512", true)
	flashFinishK()
	rowDotsK()
	scaleRowsK()
	lnFwdRows()
	lnBwdRows()
	lnBwdParamCols()
	Generate()
}

// text starts a function; constants hoisted for the previous one are
// forgotten.
func text(name, signature string) {
	TEXT(name, NOSPLIT, signature)
	Pragma("noescape")
	hoisted = map[float32]reg.VecVirtual{}
}

// consts caches broadcast constants by value.
var consts = map[float32]Mem{}

// hoisted holds the constants broadcast once before the current
// function's loop.
var hoisted map[float32]reg.VecVirtual

// hoist broadcasts constants into registers before a loop, so that bcast
// inside the loop finds them there.
func hoist(vs ...float32) {
	hoisted = map[float32]reg.VecVirtual{}
	for _, v := range vs {
		hoisted[v] = bcast(v)
	}
}

// bcast returns a zmm register holding v in every lane: a hoisted one, or
// a fresh broadcast from memory.
func bcast(v float32) reg.VecVirtual {
	if z, ok := hoisted[v]; ok {
		return z
	}
	m, ok := consts[v]
	if !ok {
		// The bits, not F32(v): avo prints 1.0 as $(1), which the
		// assembler reads as the integer 1.
		m = ConstData(fmt.Sprintf("vc%d", len(consts)), U32(math.Float32bits(v)))
		consts[v] = m
	}
	z := ZMM()
	VBROADCASTSS(m, z)
	return z
}

// param broadcasts a float32 argument to a zmm register straight from its
// stack slot. (Loading it with Load, a legacy-SSE MOVSS, and broadcasting
// the xmm costs about 160 ns a call on the Xeon of docs/BENCHMARKS.md:
// 3.6× the whole of a 256-float expRowAVX512.)
func param(name string) reg.VecVirtual {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	z := ZMM()
	VBROADCASTSS(b.Addr, z)
	return z
}

// ptr loads a pointer argument.
func ptr(name string) reg.GPVirtual { return Load(Param(name), GP64()).(reg.GPVirtual) }

// loop emits `for ; n > 0; n -= 16 { body(); ptrs += 64 }` with n the
// argument "n".
func loop(name string, ptrs []reg.GPVirtual, body func()) { avxrow.Counted(name, 16, ptrs, body) }

func mem(p reg.GPVirtual) Mem { return Mem{Base: p} }

func load(p reg.GPVirtual) reg.VecVirtual {
	z := ZMM()
	VMOVUPS(mem(p), z)
	return z
}

func copyZ(src reg.VecVirtual) reg.VecVirtual {
	z := ZMM()
	VMOVAPS(src, z)
	return z
}

func zeroZ() reg.VecVirtual {
	z := ZMM()
	VPXORD(z, z, z)
	return z
}

// GELU's constants (package coef, shared with ops/avx2gen): s = √(2/π),
// k = 0.044715.
const (
	geluS = coef.S
	geluK = coef.K
)

// geluParts returns, for x in a register, x² and th = tanh(s·(x + k·x³)).
func geluParts(x reg.VecVirtual) (x2, th reg.VecVirtual) {
	x2 = ZMM()
	VMULPS(x, x, x2)
	t := copyZ(x2)
	VFMADD213PS(bcast(geluS), bcast(geluS*geluK), t) // t = s·k·x² + s
	VMULPS(x, t, t)                                  // u = x·t
	return x2, tanh(t)
}

const tanhClamp = coef.Clamp

// geluConsts are the constants of geluParts and tanh: Eigen's rational
// tanh's numerator and denominator coefficients (package coef) after
// GELU's.
func geluConsts() []float32 {
	c := []float32{geluS, geluS * geluK, tanhClamp, -tanhClamp}
	c = append(c, coef.P()...)
	return append(c, coef.Q()...)
}

// tanh emits Eigen's rational tanh approximation of u (clamped to ±7.905):
// x·P(x²)/Q(x²).
func tanh(u reg.VecVirtual) reg.VecVirtual {
	x := ZMM()
	VMINPS(bcast(tanhClamp), u, x)
	VMAXPS(bcast(-tanhClamp), x, x)
	x2 := ZMM()
	VMULPS(x, x, x2)
	tanhP, tanhQ := coef.P(), coef.Q()
	p := copyZ(bcast(tanhP[0]))
	for _, c := range tanhP[1:] {
		VFMADD213PS(bcast(c), x2, p) // p = x²·p + c
	}
	VMULPS(x, p, p)
	q := copyZ(bcast(tanhQ[0]))
	for _, c := range tanhQ[1:] {
		VFMADD213PS(bcast(c), x2, q)
	}
	th := ZMM()
	VDIVPS(q, p, th) // th = p/q
	return th
}

func geluForward() {
	text("geluFwdAVX512", "func(out, x *float32, n int)")
	Doc("geluFwdAVX512 sets out[i] = ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) for i < n (n a multiple of 16).")
	po, px := ptr("out"), ptr("x")
	hoist(append(geluConsts(), 0.5)...)
	loop("geluFwd", []reg.GPVirtual{po, px}, func() {
		x := load(px)
		_, th := geluParts(x)
		hx := ZMM()
		VMULPS(bcast(0.5), x, hx)
		VFMADD213PS(hx, hx, th) // th = hx·th + hx
		VMOVUPS(th, mem(po))
	})
	VZEROUPPER()
	RET()
}

// geluBackward emits dx (+)= dy·GELU'(x).
func geluBackward(name string, accumulate bool) {
	text(name, "func(dx, x, dy *float32, n int)")
	if accumulate {
		Doc(name + " accumulates dx[i] += dy[i]·GELU'(x[i]) for i < n (n a multiple of 16).")
	} else {
		Doc(name + " sets dx[i] = dy[i]·GELU'(x[i]) for i < n (n a multiple of 16).")
	}
	pdx, px, pdy := ptr("dx"), ptr("x"), ptr("dy")
	hoist(append(geluConsts(), 1, 3*geluS*geluK, 0.5)...)
	loop(name, []reg.GPVirtual{pdx, px, pdy}, func() {
		x := load(px)
		x2, th := geluParts(x)
		a := copyZ(th)
		VFNMADD213PS(bcast(1), th, a)                       // a = 1 − th²
		VFMADD213PS(bcast(geluS), bcast(3*geluS*geluK), x2) // x2 = 3sk·x² + s
		VMULPS(x2, a, a)
		hx := ZMM()
		VMULPS(bcast(0.5), x, hx)
		VMULPS(hx, a, a)                        // a = ½x(1−th²)·s(1+3k·x²)
		VFMADD213PS(bcast(0.5), bcast(0.5), th) // th = ½·th + ½
		VADDPS(a, th, th)                       // th = GELU'(x)
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

// expConsts are the constants of exp (Cephes expf's polynomial last).
func expConsts() []float32 {
	return append([]float32{-87.3, 88.7, 1.44269504088896341, 0.693359375, -2.12194440e-4, 1}, coef.ExpPoly()...)
}

// exp emits e^t (Cephes expf: t = n·ln2 + r, |r| <= ln2/2, a degree-7
// polynomial for e^r, scaled by 2^n with VSCALEFPS), for t clamped to
// [-87.3, 88.7].
func exp(t reg.VecVirtual) reg.VecVirtual {
	VMAXPS(bcast(-87.3), t, t)
	VMINPS(bcast(88.7), t, t)
	n := ZMM()
	VMULPS(bcast(1.44269504088896341), t, n)
	VRNDSCALEPS(U8(0), n, n)                  // n = round(t·log₂e)
	VFNMADD231PS(bcast(0.693359375), n, t)    // r = t − n·c1
	VFNMADD231PS(bcast(-2.12194440e-4), n, t) // r −= n·c2
	poly := coef.ExpPoly()
	p := copyZ(bcast(poly[0]))
	for _, c := range poly[1:] {
		VFMADD213PS(bcast(c), t, p) // p = r·p + c
	}
	r2 := ZMM()
	VMULPS(t, t, r2)
	VFMADD213PS(t, r2, p) // p = r²·p + r
	VADDPS(bcast(1), p, p)
	e := ZMM()
	VSCALEFPS(n, p, e) // e = p·2ⁿ
	return e
}

func axpy() {
	text("axpyAVX512", "func(y, x *float32, n int, a float32)")
	Doc("axpyAVX512 sets y[i] += a·x[i] for i < n (n a multiple of 16).")
	py, px := ptr("y"), ptr("x")
	a := param("a")
	loop("axpy", []reg.GPVirtual{py, px}, func() {
		v := load(py)
		VFMADD231PS(mem(px), a, v)
		VMOVUPS(v, mem(py))
	})
	VZEROUPPER()
	RET()
}
