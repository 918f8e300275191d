package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The row kernels of FlashAttention (ops/attention_flash.go): the online
// softmax step of the forward and the recomputed probabilities and score
// gradients of the backward, any n >= 1 with masked tails.

// flashExpK emits
//
//	flashExpAVX512(p, s *float32, n int, scale float32, res *float32)
//
// the online-softmax step over one row of a key block: with m0 = res[0]
// (the running maximum, possibly −∞), m = max(m0, scale·max(s)),
// p[i] = exp(scale·s[i] − m) (p may be s), res[0] = m, res[1] = Σ p.
func flashExpK() {
	text("flashExpAVX512", "func(p, s *float32, n int, scale float32, res *float32)")
	Doc("flashExpAVX512 sets m = max(res[0], scale·max(s)), p[i] = exp(scale·s[i] − m) for i < n (n >= 1, p may be s), res[0] = m, res[1] = Σ p.")
	po, pi, pres := ptr("p"), ptr("s"), ptr("res")
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	scale := param("scale")
	hoist(expConsts()...)
	k, full := tailMask(n)
	mx := bcast(float32(math.Inf(-1)))
	rowLoop("feMax", full, k, []reg.GPVirtual{pi}, func() {
		VMAXPS(mem(pi), mx, mx)
	}, func() {
		VMAXPS(mem(pi), mx, k, mx)
	})
	reduce(mx, VMAXPS)
	shift, m0 := ZMM(), ZMM()
	VMULPS(scale, mx, shift)
	VBROADCASTSS(Mem{Base: pres}, m0)
	VMAXPS(m0, shift, shift)
	sum := zeroZ()
	rowLoop("feExp", full, k, []reg.GPVirtual{po, pi}, func() {
		t := load(pi)
		VFMSUB213PS(shift, scale, t) // t = scale·s − m
		e := exp(t)
		VMOVUPS(e, mem(po))
		VADDPS(e, sum, sum)
	}, func() {
		t := ZMM()
		VMOVUPS_Z(mem(pi), k, t)
		VFMSUB213PS(shift, scale, t)
		e := exp(t)
		VMOVUPS(e, k, mem(po))
		VADDPS(e, sum, k, sum)
	})
	reduce(sum, VADDPS)
	storeLane0(shift, Mem{Base: pres})
	storeLane0(sum, Mem{Base: pres, Disp: 4})
	VZEROUPPER()
	RET()
}

// flashGradK emits
//
//	flashGradAVX512(ds, s *float32, n int, scale, lse, d float32)
//
// the backward's row of a block: the probabilities recomputed from the
// scores and the row's log-sum-exp, s[i] = P = exp(scale·s[i] − lse), and
// the score gradients from dP (in ds), ds[i] = scale·P·(ds[i] − d), d
// being the row's D = Σ dO⊙O.
func flashGradK() {
	text("flashGradAVX512", "func(ds, s *float32, n int, scale, lse, d float32)")
	Doc("flashGradAVX512 sets s[i] = P = exp(scale·s[i] − lse) and ds[i] = scale·P·(ds[i] − d) for i < n (n >= 1).")
	pd, ps := ptr("ds"), ptr("s")
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	scale, lse, dd := param("scale"), param("lse"), param("d")
	hoist(expConsts()...)
	k, full := tailMask(n)
	grad := func(t, dp reg.VecVirtual) reg.VecVirtual {
		VFMSUB213PS(lse, scale, t) // t = scale·s − lse
		e := exp(t)
		VSUBPS(dd, dp, dp) // dP − D
		g := ZMM()
		VMULPS(scale, e, g)
		VMULPS(g, dp, dp)
		return e
	}
	rowLoop("fg", full, k, []reg.GPVirtual{pd, ps}, func() {
		t, dp := load(ps), load(pd)
		e := grad(t, dp)
		VMOVUPS(e, mem(ps))
		VMOVUPS(dp, mem(pd))
	}, func() {
		t, dp := ZMM(), ZMM()
		VMOVUPS_Z(mem(ps), k, t)
		VMOVUPS_Z(mem(pd), k, dp)
		e := grad(t, dp)
		VMOVUPS(e, k, mem(ps))
		VMOVUPS(dp, k, mem(pd))
	})
	VZEROUPPER()
	RET()
}

// rowDotsK emits
//
//	rowDotsAVX512(out, x *float32, ldx int, y *float32, ldy, n, rows int)
//
// out[r] = Σ_{i<n} x[r·ldx+i]·y[r·ldy+i] for r < rows (n >= 1): the D =
// rowsum(dO⊙O) of the flash backward, lanes summed as reduce does.
func rowDotsK() {
	text("rowDotsAVX512", "func(out, x *float32, ldx int, y *float32, ldy, n, rows int)")
	Doc("rowDotsAVX512 sets out[r] = Σ_{i<n} x[r·ldx+i]·y[r·ldy+i] for r < rows (n >= 1).")
	po, px, py := ptr("out"), ptr("x"), ptr("y")
	ldx := Load(Param("ldx"), GP64()).(reg.GPVirtual)
	ldy := Load(Param("ldy"), GP64()).(reg.GPVirtual)
	SHLQ(U8(2), ldx)
	SHLQ(U8(2), ldy)
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	rows := Load(Param("rows"), GP64()).(reg.GPVirtual)
	k, full := tailMask(n)
	TESTQ(rows, rows)
	JE(LabelRef("rd_done"))
	Label("rd_row")
	s := zeroZ()
	rowLoop("rd", full, k, []reg.GPVirtual{px, py}, func() {
		v := load(px)
		VFMADD231PS(mem(py), v, s)
	}, func() {
		v, w := ZMM(), ZMM()
		VMOVUPS_Z(mem(px), k, v)
		VMOVUPS_Z(mem(py), k, w)
		VFMADD231PS(w, v, s)
	})
	reduce(s, VADDPS)
	storeLane0(s, mem(po))
	ADDQ(U32(4), po)
	ADDQ(ldx, px)
	ADDQ(ldy, py)
	DECQ(rows)
	JNE(LabelRef("rd_row"))
	Label("rd_done")
	VZEROUPPER()
	RET()
}

// scaleRowsK emits
//
//	scaleRowsAVX512(x *float32, ld, n, rows int, a *float32)
//
// x[r·ld+i] *= a[r] for i < n (n >= 1), r < rows: the flash forward's
// rescaling of output rows by exp(m − m') and its final 1/l.
func scaleRowsK() {
	text("scaleRowsAVX512", "func(x *float32, ld, n, rows int, a *float32)")
	Doc("scaleRowsAVX512 sets x[r·ld+i] *= a[r] for i < n (n >= 1), r < rows.")
	px, pa := ptr("x"), ptr("a")
	ld := Load(Param("ld"), GP64()).(reg.GPVirtual)
	SHLQ(U8(2), ld)
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	rows := Load(Param("rows"), GP64()).(reg.GPVirtual)
	k, full := tailMask(n)
	TESTQ(rows, rows)
	JE(LabelRef("sr_done"))
	Label("sr_row")
	s := ZMM()
	VBROADCASTSS(mem(pa), s)
	rowLoop("sr", full, k, []reg.GPVirtual{px}, func() {
		v := load(px)
		VMULPS(s, v, v)
		VMOVUPS(v, mem(px))
	}, func() {
		v := ZMM()
		VMOVUPS_Z(mem(px), k, v)
		VMULPS(s, v, v)
		VMOVUPS(v, k, mem(px))
	})
	ADDQ(U32(4), pa)
	ADDQ(ld, px)
	DECQ(rows)
	JNE(LabelRef("sr_row"))
	Label("sr_done")
	VZEROUPPER()
	RET()
}
