package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"trellis/internal/avxrow"
)

// Whole-row kernels with masked tails: any n >= 1, one call a row.

// reduce combines the 16 lanes of z with op (VADDPS or VMAXPS) as a
// balanced tree — lane i with i+8, then i+4, i+2, i+1, the order of
// ops.lanes16 — leaving the result in every lane.
func reduce(z reg.VecVirtual, op func(...Op)) {
	t := ZMM()
	VSHUFF32X4(U8(0x4E), z, z, t) // swap the 256-bit halves
	op(t, z, z)
	VSHUFF32X4(U8(0xB1), z, z, t) // swap 128-bit blocks within each half
	op(t, z, z)
	VPERMILPS(U8(0x4E), z, t) // swap 64-bit pairs
	op(t, z, z)
	VPERMILPS(U8(0xB1), z, t) // swap neighbours
	op(t, z, z)
}

// softmaxRowK emits
//
//	softmaxRowAVX512(out, in *float32, n int, scale float32, res *float32)
//
// out = softmax(scale·in) over n >= 1 elements (out may be in), with
// res[0] = scale·max(in) and res[1] = Σ exp(scale·in − res[0]).
func softmaxRowK() {
	text("softmaxRowAVX512", "func(out, in *float32, n int, scale float32, res *float32)")
	Doc("softmaxRowAVX512 sets out[i] = exp(scale·in[i] − m)/s for i < n (n >= 1, out may be in), m = scale·max(in), s = Σ exp(scale·in − m); res[0] = m, res[1] = s.")
	po, pi := ptr("out"), ptr("in")
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	scale := param("scale")
	hoist(expConsts()...)
	shift, sum := softmaxBody("sm", po, pi, n, scale)
	storeLane0(shift, Mem{Base: ptr("res")})
	storeLane0(sum, Mem{Base: ptr("res"), Disp: 4})
	VZEROUPPER()
	RET()
}

// rowMaxK emits
//
//	rowMaxAVX512(in *float32, n int, res *float32)
//
// res[0] = max of in's n >= 1 elements: a vocabulary shard's row maximum
// (ops.VocabRowMax).
func rowMaxK() {
	text("rowMaxAVX512", "func(in *float32, n int, res *float32)")
	Doc("rowMaxAVX512 sets res[0] = max(in[:n]) (n >= 1).")
	pi := ptr("in")
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	k, full := avxrow.TailMask(n)
	storeLane0(rowMax("rm", pi, full, k), Mem{Base: ptr("res")})
	VZEROUPPER()
	RET()
}

// expRowK emits
//
//	expRowAVX512(out, in *float32, n int, shift float32, res *float32)
//
// out = exp(in − shift) over n >= 1 elements (out may be in), res[0] =
// Σ out: the exponentials of a vocabulary-parallel cross-entropy, whose
// shift is the row's maximum over the whole group (ops.VocabExpSum). Each
// exponential has the bits softmaxRowAVX512's has for the same argument.
func expRowK() {
	text("expRowAVX512", "func(out, in *float32, n int, shift float32, res *float32)")
	Doc("expRowAVX512 sets out[i] = exp(in[i] − shift) for i < n (n >= 1, out may be in) and res[0] = Σ out.")
	po, pi := ptr("out"), ptr("in")
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	shift := param("shift")
	hoist(expConsts()...)
	k, full := avxrow.TailMask(n)
	sum := expSum("er", po, pi, full, k, func(t reg.VecVirtual) { VSUBPS(shift, t, t) })
	storeLane0(sum, Mem{Base: ptr("res")})
	VZEROUPPER()
	RET()
}

// softmaxCausalK emits
//
//	softmaxCausalAVX512(a *float32, ld, n0, rows int, scale float32)
//
// the in-place softmax(scale·x) of rows rows of a (row stride ld), row j
// over its first n0+j elements: the causal rows of an attention panel.
// Each row gets the bits softmaxRowAVX512 would give it.
func softmaxCausalK() {
	text("softmaxCausalAVX512", "func(a *float32, ld, n0, rows int, scale float32)")
	Doc("softmaxCausalAVX512 sets row j < rows of a (row stride ld) to softmax(scale·row) over its first n0+j elements, in place.")
	pa := ptr("a")
	ld := Load(Param("ld"), GP64()).(reg.GPVirtual)
	SHLQ(U8(2), ld)
	n := Load(Param("n0"), GP64()).(reg.GPVirtual)
	rows := Load(Param("rows"), GP64()).(reg.GPVirtual)
	scale := param("scale")
	hoist(expConsts()...)
	TESTQ(rows, rows)
	JE(LabelRef("sc_done"))
	pi := GP64() // the same rows as pa: avxrow.Loop moves each pointer it is given
	Label("sc_row")
	MOVQ(pa, pi)
	softmaxBody("sc", pa, pi, n, scale)
	ADDQ(ld, pa)
	INCQ(n)
	DECQ(rows)
	JNE(LabelRef("sc_row"))
	Label("sc_done")
	VZEROUPPER()
	RET()
}

// softmaxBody emits out = softmax(scale·in) over n >= 1 elements (the
// exp constants hoisted by the caller) and returns m = scale·max(in) and
// s = Σ exp(scale·in − m), each in every lane. Labels start with name.
func softmaxBody(name string, po, pi, n reg.GPVirtual, scale reg.VecVirtual) (shift, sum reg.VecVirtual) {
	k, full := avxrow.TailMask(n)
	mx := rowMax(name+"Max", pi, full, k)
	shift = ZMM()
	VMULPS(scale, mx, shift)

	sum = expSum(name+"Exp", po, pi, full, k, func(t reg.VecVirtual) {
		VFMSUB213PS(shift, scale, t) // t = scale·t − shift
	})
	inv := copyZ(bcast(1))
	VDIVPS(sum, inv, inv) // 1/s
	avxrow.Loop(name+"Scale", full, k, []reg.GPVirtual{po}, func() {
		v := ZMM()
		VMULPS(mem(po), inv, v)
		VMOVUPS(v, mem(po))
	}, func() {
		v := ZMM()
		VMOVUPS_Z(mem(po), k, v)
		VMULPS(inv, v, v)
		VMOVUPS(v, k, mem(po))
	})
	return shift, sum
}

// rowMax emits the maximum of the row at pi (full vectors, then the tail
// under k) and returns it in every lane. Labels start with name.
func rowMax(name string, pi, full reg.GPVirtual, k reg.OpmaskVirtual) reg.VecVirtual {
	mx := bcast(float32(math.Inf(-1)))
	avxrow.Loop(name, full, k, []reg.GPVirtual{pi}, func() {
		VMAXPS(mem(pi), mx, mx)
	}, func() {
		VMAXPS(mem(pi), mx, k, mx) // merge: masked lanes keep −∞
	})
	reduce(mx, VMAXPS)
	return mx
}

// expSum emits out[i] = exp(arg(in[i])) over the row (full vectors, then
// the tail under k; out may be in) and returns Σ out in every lane: arg
// turns a loaded vector into the exponent in place. Labels start with
// name.
func expSum(name string, po, pi, full reg.GPVirtual, k reg.OpmaskVirtual, arg func(t reg.VecVirtual)) reg.VecVirtual {
	sum := zeroZ()
	avxrow.Loop(name, full, k, []reg.GPVirtual{po, pi}, func() {
		t := load(pi)
		arg(t)
		e := exp(t)
		VMOVUPS(e, mem(po))
		VADDPS(e, sum, sum)
	}, func() {
		t := ZMM()
		VMOVUPS_Z(mem(pi), k, t)
		arg(t)
		e := exp(t)
		VMOVUPS(e, k, mem(po))
		VADDPS(e, sum, k, sum)
	})
	reduce(sum, VADDPS)
	return sum
}

// storeLane0 writes lane 0 of z to m.
func storeLane0(z reg.VecVirtual, m Mem) {
	one, k := GP32(), K()
	MOVL(U32(1), one)
	KMOVW(one, k)
	VMOVUPS(z, k, m)
}

// softmaxGradRowK emits
//
//	softmaxGradRowAVX512(d, p *float32, n int, scale float32)
//
// d = scale·p⊙(d − Σ p⊙d) over n >= 1 elements: the gradient of
// softmax(scale·x) at output p, given d = dL/dp, with respect to x.
func softmaxGradRowK() {
	text("softmaxGradRowAVX512", "func(d, p *float32, n int, scale float32)")
	Doc("softmaxGradRowAVX512 sets d[i] = (scale·p[i])·(d[i] − s) for i < n (n >= 1), s = Σ p[i]·d[i].")
	pd, pp := ptr("d"), ptr("p")
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	scale := param("scale")
	softmaxGradBody("sg", pd, pp, n, scale)
	VZEROUPPER()
	RET()
}

// softmaxGradCausalK emits
//
//	softmaxGradCausalAVX512(d *float32, ldd int, p *float32, ldp, n0, rows int, scale float32)
//
// softmaxGradRowAVX512 over rows rows of d and p (row strides ldd, ldp),
// row j over its first n0+j elements, with the same bits.
func softmaxGradCausalK() {
	text("softmaxGradCausalAVX512", "func(d *float32, ldd int, p *float32, ldp, n0, rows int, scale float32)")
	Doc("softmaxGradCausalAVX512 runs softmaxGradRowAVX512 on rows j < rows of d and p (row strides ldd, ldp) over their first n0+j elements.")
	pd, pp := ptr("d"), ptr("p")
	ldd := Load(Param("ldd"), GP64()).(reg.GPVirtual)
	ldp := Load(Param("ldp"), GP64()).(reg.GPVirtual)
	SHLQ(U8(2), ldd)
	SHLQ(U8(2), ldp)
	n := Load(Param("n0"), GP64()).(reg.GPVirtual)
	rows := Load(Param("rows"), GP64()).(reg.GPVirtual)
	scale := param("scale")
	TESTQ(rows, rows)
	JE(LabelRef("sgc_done"))
	Label("sgc_row")
	softmaxGradBody("sgc", pd, pp, n, scale)
	ADDQ(ldd, pd)
	ADDQ(ldp, pp)
	INCQ(n)
	DECQ(rows)
	JNE(LabelRef("sgc_row"))
	Label("sgc_done")
	VZEROUPPER()
	RET()
}

// softmaxGradBody emits d = scale·p⊙(d − Σ p⊙d) over n >= 1 elements.
// Labels start with name.
func softmaxGradBody(name string, pd, pp, n reg.GPVirtual, scale reg.VecVirtual) {
	k, full := avxrow.TailMask(n)
	s := zeroZ()
	avxrow.Loop(name+"Dot", full, k, []reg.GPVirtual{pd, pp}, func() {
		v := load(pp)
		VFMADD231PS(mem(pd), v, s)
	}, func() {
		v, w := ZMM(), ZMM()
		VMOVUPS_Z(mem(pp), k, v)
		VMOVUPS_Z(mem(pd), k, w)
		VFMADD231PS(w, v, s)
	})
	reduce(s, VADDPS)
	grad := func(d, p reg.VecVirtual) {
		VSUBPS(s, d, d)
		VMULPS(scale, p, p)
		VMULPS(p, d, d)
	}
	avxrow.Loop(name+"Grad", full, k, []reg.GPVirtual{pd, pp}, func() {
		d, p := load(pd), load(pp)
		grad(d, p)
		VMOVUPS(d, mem(pd))
	}, func() {
		d, p := ZMM(), ZMM()
		VMOVUPS_Z(mem(pd), k, d)
		VMOVUPS_Z(mem(pp), k, p)
		grad(d, p)
		VMOVUPS(d, k, mem(pd))
	})
}
