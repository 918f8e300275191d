package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The LayerNorm row kernels: the output, the two row sums of the
// backward, the input gradient and the parameter gradients.

func lnOut() {
	text("lnOutAVX512", "func(out, x, w, b *float32, n int, m, s float32)")
	Doc("lnOutAVX512 sets out[i] = (x[i]−m)·s·w[i] + b[i] for i < n (n a multiple of 16).")
	po, px, pw, pb := ptr("out"), ptr("x"), ptr("w"), ptr("b")
	m, s := param("m"), param("s")
	loop("lnOut", []reg.GPVirtual{po, px, pw, pb}, func() {
		v := load(px)
		VSUBPS(m, v, v)
		VMULPS(s, v, v)
		bb := load(pb)
		VFMADD231PS(mem(pw), v, bb) // bb = v·w + b
		VMOVUPS(bb, mem(po))
	})
	VZEROUPPER()
	RET()
}

func lnBwdSums() {
	text("lnBwdSumsAVX512", "func(dy, x, w *float32, n int, m, s float32, sums *float32)")
	Doc("lnBwdSumsAVX512 writes to sums[0:16] the lane sums of g = w·dy and to sums[16:32] those of g·(x−m)·s, over i < n (n a multiple of 16).")
	pdy, px, pw := ptr("dy"), ptr("x"), ptr("w")
	m, s := param("m"), param("s")
	ag, agx := zeroZ(), zeroZ()
	loop("lnBwdSums", []reg.GPVirtual{pdy, px, pw}, func() {
		g := load(pdy)
		VMULPS(mem(pw), g, g)
		VADDPS(g, ag, ag)
		xh := load(px)
		VSUBPS(m, xh, xh)
		VMULPS(s, xh, xh)
		VFMADD231PS(xh, g, agx)
	})
	out := ptr("sums")
	VMOVUPS(ag, Mem{Base: out})
	VMOVUPS(agx, Mem{Base: out, Disp: 64})
	VZEROUPPER()
	RET()
}

func lnBwdDx() {
	text("lnBwdDxAVX512", "func(dx, dy, x, w *float32, n int, m, s, gmean, gxmean float32)")
	Doc("lnBwdDxAVX512 sets dx[i] += s·(w[i]·dy[i] − gmean − (x[i]−m)·s·gxmean) for i < n (n a multiple of 16).")
	pdx, pdy, px, pw := ptr("dx"), ptr("dy"), ptr("x"), ptr("w")
	m, s, g, gx := param("m"), param("s"), param("gmean"), param("gxmean")
	loop("lnBwdDx", []reg.GPVirtual{pdx, pdy, px, pw}, func() {
		xh := load(px)
		VSUBPS(m, xh, xh)
		VMULPS(s, xh, xh)
		t := load(pdy)
		VMULPS(mem(pw), t, t)
		VSUBPS(g, t, t)
		VFNMADD231PS(gx, xh, t) // t −= x̂·gx
		d := load(pdx)
		VFMADD231PS(s, t, d) // d += s·t
		VMOVUPS(d, mem(pdx))
	})
	VZEROUPPER()
	RET()
}

func lnBwdParams() {
	text("lnBwdParamsAVX512", "func(dw, db, dy, x *float32, n int, m, s float32)")
	Doc("lnBwdParamsAVX512 sets dw[i] += dy[i]·(x[i]−m)·s and db[i] += dy[i] for i < n (n a multiple of 16).")
	pdw, pdb, pdy, px := ptr("dw"), ptr("db"), ptr("dy"), ptr("x")
	m, s := param("m"), param("s")
	loop("lnBwdParams", []reg.GPVirtual{pdw, pdb, pdy, px}, func() {
		dy := load(pdy)
		b := load(pdb)
		VADDPS(dy, b, b)
		VMOVUPS(b, mem(pdb))
		xh := load(px)
		VSUBPS(m, xh, xh)
		VMULPS(s, xh, xh)
		w := load(pdw)
		VFMADD231PS(xh, dy, w)
		VMOVUPS(w, mem(pdw))
	})
	VZEROUPPER()
	RET()
}
