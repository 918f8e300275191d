package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// adamw emits the AdamW update of ops.adamwCoef.apply, 16 elements at a
// time, with the same operations in the same order (no fused
// multiply-adds; VSQRTPS rounds √ of a float32 as float32(math.Sqrt(float64))
// does), so both give the same bits.
func adamw() {
	text("adamwAVX512", "func(params, grads, mom, vel *float32, n int, c *float32)")
	Doc("adamwAVX512 applies adamwCoef.apply's update to params, grads, mom, vel [0:n] (n a multiple of 16); c points to the adamwCoef.")
	pp, pg, pm, pv := ptr("params"), ptr("grads"), ptr("mom"), ptr("vel")
	pc := Load(Param("c"), GP64()).(reg.GPVirtual)
	// Fields of adamwCoef, in order: lr, b1, b2, ob1, ob2, eps, wd, s, bc1, bc2.
	field := func(i int) reg.VecVirtual {
		z := ZMM()
		VBROADCASTSS(Mem{Base: pc, Disp: 4 * i}, z)
		return z
	}
	lr, b1, b2, ob1, ob2, eps, wd, s, bc1, bc2 := field(0), field(1), field(2), field(3), field(4), field(5), field(6), field(7), field(8), field(9)
	loop("adamw", []reg.GPVirtual{pp, pg, pm, pv}, func() {
		g := load(pg)
		VMULPS(s, g, g) // g = grad·s
		mi, t := ZMM(), ZMM()
		VMULPS(mem(pm), b1, mi) // mi = b1·m + ob1·g
		VMULPS(g, ob1, t)
		VADDPS(t, mi, mi)
		VMOVUPS(mi, mem(pm))
		vi := ZMM()
		VMULPS(g, g, t) // vi = b2·v + ob2·g²
		VMULPS(t, ob2, t)
		VMULPS(mem(pv), b2, vi)
		VADDPS(t, vi, vi)
		VMOVUPS(vi, mem(pv))
		VMULPS(bc1, mi, mi) // m̂
		VMULPS(bc2, vi, vi) // v̂
		VSQRTPS(vi, vi)
		VADDPS(eps, vi, vi)
		VDIVPS(vi, mi, mi) // m̂/(√v̂+ε)
		p := load(pp)
		VMULPS(p, wd, t)
		VADDPS(t, mi, mi)
		VMULPS(lr, mi, mi)
		VSUBPS(mi, p, p)
		VMOVUPS(p, mem(pp))
	})
	VZEROUPPER()
	RET()
}
