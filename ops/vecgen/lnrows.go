package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"trellis/internal/avxrow"
)

// LayerNorm over whole blocks of rows, one call for many rows of n
// channels (n >= 1, tails under a lane mask). For n a multiple of 16
// they give the bits of the per-row kernels of layernorm.go and their Go
// reductions (lanes16, then float32 division by n; rstd as
// float32(1/√(float64(var)+ε))).

// lnEps is ops.LayerNormEps.
const lnEps = 1e-5

var f64consts = map[float64]Mem{}

// const64 is a float64 constant in memory.
func const64(v float64) Mem {
	m, ok := f64consts[v]
	if !ok {
		m = ConstData("vd"+string(rune('a'+len(f64consts))), U64(math.Float64bits(v)))
		f64consts[v] = m
	}
	return m
}

// rowsLoop emits `for r := rows; r > 0; r-- { body(); ptrs += stride }`.
func rowsLoop(name string, rows reg.GPVirtual, ptrs []reg.GPVirtual, stride reg.GPVirtual, body func()) {
	TESTQ(rows, rows)
	JE(LabelRef(name + "_rowsdone"))
	Label(name + "_row")
	body()
	for _, p := range ptrs {
		ADDQ(stride, p)
	}
	DECQ(rows)
	JNE(LabelRef(name + "_row"))
	Label(name + "_rowsdone")
}

// rstdOf returns, in every lane, float32(1/√(float64(v)+ε)) of lane 0 of v.
func rstdOf(v reg.VecVirtual) reg.VecVirtual {
	d, one, r, f := XMM(), XMM(), XMM(), XMM()
	VCVTSS2SD(v.AsX(), v.AsX(), d)
	VADDSD(const64(lnEps), d, d)
	VSQRTSD(d, d, d)
	VMOVSD(const64(1), one)
	VDIVSD(d, one, r)
	VCVTSD2SS(r, r, f)
	z := ZMM()
	VBROADCASTSS(f, z)
	return z
}

func lnFwdRows() {
	text("lnFwdRowsAVX512", "func(out, x, w, b, mean, rstd *float32, n, rows int)")
	Doc("lnFwdRowsAVX512 runs LayerNormForward over rows rows of n >= 1 channels: per row m = Σx/n, s = float32(1/√(float64(Σ(x−m)²/n)+ε)), out = (x−m)·s·w + b; mean[r] = m, rstd[r] = s.")
	po, px, pw, pb, pm, ps := ptr("out"), ptr("x"), ptr("w"), ptr("b"), ptr("mean"), ptr("rstd")
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	rows := Load(Param("rows"), GP64()).(reg.GPVirtual)
	k, full := avxrow.TailMask(n)
	stride := GP64()
	MOVQ(n, stride)
	SHLQ(U8(2), stride)
	nf := ZMM() // n as float32 in every lane
	t := GP64()
	MOVQ(n, t)
	xn := XMM()
	VCVTSI2SSQ(t, xn, xn)
	VBROADCASTSS(xn, nf)
	lane0 := K()
	one := GP32()
	MOVL(U32(1), one)
	KMOVW(one, lane0)
	rowsLoop("lnFwdRows", rows, []reg.GPVirtual{po, px}, stride, func() {
		sum := zeroZ()
		avxrow.Loop("lnFwdSum", full, k, []reg.GPVirtual{px}, func() {
			VADDPS(mem(px), sum, sum)
		}, func() {
			v := ZMM()
			VMOVUPS_Z(mem(px), k, v)
			VADDPS(v, sum, sum)
		})
		reduce(sum, VADDPS)
		m := ZMM()
		VDIVPS(nf, sum, m)
		sq := zeroZ()
		avxrow.Loop("lnFwdSq", full, k, []reg.GPVirtual{px}, func() {
			d := load(px)
			VSUBPS(m, d, d)
			VFMADD231PS(d, d, sq)
		}, func() {
			d := ZMM()
			VMOVUPS_Z(mem(px), k, d)
			VSUBPS_Z(m, d, k, d)
			VFMADD231PS(d, d, sq)
		})
		reduce(sq, VADDPS)
		VDIVPS(nf, sq, sq)
		s := rstdOf(sq)
		out := func(v reg.VecVirtual, wv, bv Mem, mask bool) reg.VecVirtual {
			VSUBPS(m, v, v)
			VMULPS(s, v, v)
			bb := ZMM()
			if mask {
				VMOVUPS_Z(bv, k, bb)
				ww := ZMM()
				VMOVUPS_Z(wv, k, ww)
				VFMADD231PS(ww, v, bb)
			} else {
				VMOVUPS(bv, bb)
				VFMADD231PS(wv, v, bb) // bb = v·w + b
			}
			return bb
		}
		avxrow.Loop("lnFwdOut", full, k, []reg.GPVirtual{po, px, pw, pb}, func() {
			VMOVUPS(out(load(px), mem(pw), mem(pb), false), mem(po))
		}, func() {
			v := ZMM()
			VMOVUPS_Z(mem(px), k, v)
			VMOVUPS(out(v, mem(pw), mem(pb), true), k, mem(po))
		})
		VMOVUPS(m, lane0, mem(pm))
		VMOVUPS(s, lane0, mem(ps))
		ADDQ(U32(4), pm)
		ADDQ(U32(4), ps)
	})
	VZEROUPPER()
	RET()
}

func lnBwdRows() {
	text("lnBwdRowsAVX512", "func(dx, dy, x, w, mean, rstd, dw, db *float32, n, rows int)")
	Doc("lnBwdRowsAVX512 runs LayerNormBackward over rows rows of n >= 1 channels: per row, with x̂ = (x−m)·s and g = w·dy, dx += s·(g − Σg/n − x̂·Σ(g·x̂)/n); and, unless dw is nil, dw += dy·x̂ and db += dy, rows in order.")
	pdx, pdy, px, pw, pm, ps := ptr("dx"), ptr("dy"), ptr("x"), ptr("w"), ptr("mean"), ptr("rstd")
	pdw, pdb := ptr("dw"), ptr("db")
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	rows := Load(Param("rows"), GP64()).(reg.GPVirtual)
	k, full := avxrow.TailMask(n)
	stride := GP64()
	MOVQ(n, stride)
	SHLQ(U8(2), stride)
	nf := ZMM()
	t := GP64()
	MOVQ(n, t)
	xn := XMM()
	VCVTSI2SSQ(t, xn, xn)
	VBROADCASTSS(xn, nf)
	rowsLoop("lnBwdRows", rows, []reg.GPVirtual{pdx, pdy, px}, stride, func() {
		m, s := ZMM(), ZMM()
		VBROADCASTSS(mem(pm), m)
		VBROADCASTSS(mem(ps), s)
		ag, agx := zeroZ(), zeroZ()
		sums := func(g, xh reg.VecVirtual) {
			VADDPS(g, ag, ag)
			VSUBPS(m, xh, xh)
			VMULPS(s, xh, xh)
			VFMADD231PS(xh, g, agx)
		}
		avxrow.Loop("lnBwdSums", full, k, []reg.GPVirtual{pdy, px, pw}, func() {
			g := load(pdy)
			VMULPS(mem(pw), g, g)
			sums(g, load(px))
		}, func() {
			g, ww, xh := ZMM(), ZMM(), ZMM()
			VMOVUPS_Z(mem(pdy), k, g)
			VMOVUPS_Z(mem(pw), k, ww)
			VMULPS(ww, g, g)
			VMOVUPS_Z(mem(px), k, xh)
			VSUBPS_Z(m, xh, k, xh) // masked lanes stay 0
			VMULPS(s, xh, xh)
			VADDPS(g, ag, ag)
			VFMADD231PS(xh, g, agx)
		})
		reduce(ag, VADDPS)
		reduce(agx, VADDPS)
		VDIVPS(nf, ag, ag)   // mean of g
		VDIVPS(nf, agx, agx) // mean of g·x̂
		// dx += s·(w·dy − ḡ − x̂·gx̄)
		dxOf := func(d, dy, xh, ww reg.VecVirtual) {
			VSUBPS(m, xh, xh)
			VMULPS(s, xh, xh)
			VMULPS(ww, dy, dy)
			VSUBPS(ag, dy, dy)
			VFNMADD231PS(agx, xh, dy)
			VFMADD231PS(s, dy, d)
		}
		avxrow.Loop("lnBwdDx", full, k, []reg.GPVirtual{pdx, pdy, px, pw}, func() {
			d, dy, xh, ww := load(pdx), load(pdy), load(px), load(pw)
			dxOf(d, dy, xh, ww)
			VMOVUPS(d, mem(pdx))
		}, func() {
			d, dy, xh, ww := ZMM(), ZMM(), ZMM(), ZMM()
			VMOVUPS_Z(mem(pdx), k, d)
			VMOVUPS_Z(mem(pdy), k, dy)
			VMOVUPS_Z(mem(px), k, xh)
			VMOVUPS_Z(mem(pw), k, ww)
			dxOf(d, dy, xh, ww)
			VMOVUPS(d, k, mem(pdx))
		})
		TESTQ(pdw, pdw)
		JE(LabelRef("lnBwdRows_noparams"))
		// dw += dy·x̂, db += dy (as lnBwdParamsAVX512)
		paramRow("lnBwdParams", full, k, pdw, pdb, pdy, px, m, s)
		Label("lnBwdRows_noparams")
		ADDQ(U32(4), pm)
		ADDQ(U32(4), ps)
	})
	VZEROUPPER()
	RET()
}

func lnBwdParamCols() {
	text("lnBwdParamColsAVX512", "func(dw, db, dy, x, mean, rstd *float32, n, rows, ld int)")
	Doc("lnBwdParamColsAVX512 sets dw += dy·(x−m)·s and db += dy over rows rows (row stride ld) of n >= 1 columns, rows in order, as lnBwdRowsAVX512 does for its parameters.")
	pdw, pdb, pdy, px, pm, ps := ptr("dw"), ptr("db"), ptr("dy"), ptr("x"), ptr("mean"), ptr("rstd")
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	rows := Load(Param("rows"), GP64()).(reg.GPVirtual)
	k, full := avxrow.TailMask(n)
	stride := Load(Param("ld"), GP64()).(reg.GPVirtual)
	SHLQ(U8(2), stride)
	rowsLoop("lnBwdCols", rows, []reg.GPVirtual{pdy, px}, stride, func() {
		m, s := ZMM(), ZMM()
		VBROADCASTSS(mem(pm), m)
		VBROADCASTSS(mem(ps), s)
		paramRow("lnBwdColsP", full, k, pdw, pdb, pdy, px, m, s)
		ADDQ(U32(4), pm)
		ADDQ(U32(4), ps)
	})
	VZEROUPPER()
	RET()
}

// paramRow emits one row of LayerNorm's parameter gradients over the row's
// columns (full vectors, then the masked tail k), with mean m and rstd s
// broadcast: dw += dy·(x−m)·s, db += dy.
func paramRow(name string, full reg.GPVirtual, k reg.OpmaskVirtual, pdw, pdb, pdy, px reg.GPVirtual, m, s reg.VecVirtual) {
	params := func(dy, xh, bb, ww reg.VecVirtual) {
		VADDPS(dy, bb, bb)
		VSUBPS(m, xh, xh)
		VMULPS(s, xh, xh)
		VFMADD231PS(xh, dy, ww)
	}
	avxrow.Loop(name, full, k, []reg.GPVirtual{pdw, pdb, pdy, px}, func() {
		dy, bb, xh, ww := load(pdy), load(pdb), load(px), load(pdw)
		params(dy, xh, bb, ww)
		VMOVUPS(bb, mem(pdb))
		VMOVUPS(ww, mem(pdw))
	}, func() {
		dy, bb, xh, ww := ZMM(), ZMM(), ZMM(), ZMM()
		VMOVUPS_Z(mem(pdy), k, dy)
		VMOVUPS_Z(mem(pdb), k, bb)
		VMOVUPS_Z(mem(px), k, xh)
		VMOVUPS_Z(mem(pdw), k, ww)
		params(dy, xh, bb, ww)
		VMOVUPS(bb, k, mem(pdb))
		VMOVUPS(ww, k, mem(pdw))
	})
}
