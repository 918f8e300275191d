package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"trellis/internal/avxrow"
	"trellis/ops/internal/coef"
)

// The tile kernels of FlashAttention (ops/attention_flash.go): the online
// softmax step of the forward and its end, the recomputed probabilities
// and score gradients of the backward, and the row sums D; rows of any
// length with masked tails.

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
	k, full := avxrow.TailMask(n)
	TESTQ(rows, rows)
	JE(LabelRef("rd_done"))
	Label("rd_row")
	s := zeroZ()
	avxrow.Loop("rd", full, k, []reg.GPVirtual{px, py}, func() {
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
	k, full := avxrow.TailMask(n)
	TESTQ(rows, rows)
	JE(LabelRef("sr_done"))
	Label("sr_row")
	s := ZMM()
	VBROADCASTSS(mem(pa), s)
	avxrow.Loop("sr", full, k, []reg.GPVirtual{px}, func() {
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

// zeroRange emits the zeroing of n >= 0 floats from p (p and n are left
// as they were). Labels start with name.
func zeroRange(name string, p, n reg.GPVirtual) {
	k, full := avxrow.TailMask(n)
	z := zeroZ()
	avxrow.Loop(name, full, k, []reg.GPVirtual{p}, func() {
		VMOVUPS(z, mem(p))
	}, func() {
		VMOVUPS(z, k, mem(p))
	})
}

// flashExpTileK emits
//
//	flashExpTileAVX512(s *float32, ld, n0, w, rows int, scale float32, mla *float32, band int)
//
// the online-softmax step over the rows r < rows of a block of scores
// (row stride ld, w keys a row), row r over its first nv = min(n0+r, w)
// >= 1 keys (the keys its query sees; n0 >= 1), the rest of the row
// [nv, w) zeroed; mla holds m, l and α of row r at mla[r], mla[band+r]
// and mla[2·band+r]: m is the running maximum, l the running sum, and the
// step sets m' = max(m, scale·max(s)), s[i] = exp(scale·s[i] − m'),
// α = exp(m − m'), l = l·α + Σ s, m = m'.
// Software-pipelined: the maximum of row r+1 is taken before the exps of
// row r, so that its dependent chain (a pass and a reduction) runs while
// the exps, which no longer wait on anything, fill the pipes.
func flashExpTileK() {
	text("flashExpTileAVX512", "func(s *float32, ld, n0, w, rows int, scale float32, mla *float32, band int)")
	Doc("flashExpTileAVX512 runs the online-softmax step on rows r < rows of s (row stride ld) over their first min(n0+r, w) elements (n0 >= 1), zeroing the rest of each row's w, with m, l, α of row r at mla[r], mla[band+r], mla[2·band+r].")
	ps, pm := ptr("s"), ptr("mla")
	ld := Load(Param("ld"), GP64()).(reg.GPVirtual)
	SHLQ(U8(2), ld)
	n0 := Load(Param("n0"), GP64()).(reg.GPVirtual)
	w := Load(Param("w"), GP64()).(reg.GPVirtual)
	rows := Load(Param("rows"), GP64()).(reg.GPVirtual)
	bs := Load(Param("band"), GP64()).(reg.GPVirtual)
	SHLQ(U8(2), bs)
	scale := param("scale")
	hoist(expFlashConsts()...)
	TESTQ(rows, rows)
	JE(LabelRef("fet_done"))
	nvN, shiftN := GP64(), ZMM()
	// shiftN = max(m, scale·max(row at p over nvN)), m at pm+disp.
	maxStep := func(name string, p reg.GPVirtual, disp int) {
		MOVQ(n0, nvN)
		CMPQ(nvN, w)
		CMOVQGT(w, nvN) // nvN = min(n0, w)
		k, full := avxrow.TailMask(nvN)
		mx := bcast(float32(math.Inf(-1)))
		avxrow.Loop(name, full, k, []reg.GPVirtual{p}, func() {
			VMAXPS(mem(p), mx, mx)
		}, func() {
			VMAXPS(mem(p), mx, k, mx)
		})
		reduce(mx, VMAXPS)
		m0 := ZMM()
		VMULPS(scale, mx, shiftN)
		VBROADCASTSS(Mem{Base: pm, Disp: disp}, m0)
		VMAXPS(m0, shiftN, shiftN)
	}
	maxStep("fetMax0", ps, 0)
	Label("fet_row")
	shift, nv := ZMM(), GP64()
	VMOVAPS(shiftN, shift)
	MOVQ(nvN, nv)
	DECQ(rows)
	JE(LabelRef("fet_exp"))
	{
		INCQ(n0)
		pn := GP64()
		LEAQ(Mem{Base: ps, Index: ld, Scale: 1}, pn)
		maxStep("fetMax", pn, 4)
	}
	Label("fet_exp")
	{
		k, full := avxrow.TailMask(nv)
		sum := zeroZ()
		avxrow.Loop("fetExp", full, k, []reg.GPVirtual{ps}, func() {
			t := load(ps)
			VFMSUB213PS(shift, scale, t) // t = scale·s − m'
			e := expFlash(t)
			VMOVUPS(e, mem(ps))
			VADDPS(e, sum, sum)
		}, func() {
			t := ZMM()
			VMOVUPS_Z(mem(ps), k, t)
			VFMSUB213PS(shift, scale, t)
			e := expFlash(t)
			VMOVUPS(e, k, mem(ps))
			VADDPS(e, sum, k, sum)
		})
		reduce(sum, VADDPS)
		m0 := ZMM()
		VBROADCASTSS(Mem{Base: pm}, m0)
		VSUBPS(shift, m0, m0) // m − m'
		a := expFlash(m0)
		l := ZMM()
		VBROADCASTSS(Mem{Base: pm, Index: bs, Scale: 1}, l)
		VMULPS(a, l, l)
		VADDPS(sum, l, l) // l·α + Σ
		storeLane0(shift, Mem{Base: pm})
		storeLane0(l, Mem{Base: pm, Index: bs, Scale: 1})
		storeLane0(a, Mem{Base: pm, Index: bs, Scale: 2})
		// Zero [nv, w).
		pz, cnt := GP64(), GP64()
		LEAQ(Mem{Base: ps, Index: nv, Scale: 4}, pz)
		MOVQ(w, cnt)
		SUBQ(nv, cnt)
		zeroRange("fetZero", pz, cnt)
	}
	ADDQ(ld, ps)
	ADDQ(U32(4), pm)
	TESTQ(rows, rows)
	JNE(LabelRef("fet_row"))
	Label("fet_done")
	VZEROUPPER()
	RET()
}

// flashGradTileK emits
//
//	flashGradTileAVX512(ds, s *float32, ld, n0, w, pad, rows int, scale float32, lse, d *float32)
//
// the backward's step over the rows r < rows of a block (ds and s of row
// stride ld, w keys a row), row r over its first nv = min(n0+r, w) keys:
// the probabilities recomputed from the scores and the row's
// log-sum-exp, s[i] = P = exp(scale·s[i] − lse[r]), and the score
// gradients from dP (in ds), ds[i] = P·(scale·ds[i] − scale·d[r]), d[r]
// being the row's D = Σ dO⊙O (with dot: set first to Σ P⊙dP over the
// row); both rows zeroed on [max(nv, 0), min(w, n0+r+pad)): the keys past
// its query that the block products still read.
func flashGradTileK(name string, dot bool) {
	lb := func(l string) string { return name + "_" + l }
	text(name, "func(ds, s *float32, ld, n0, w, pad, rows int, scale float32, lse, d *float32)")
	if dot {
		Doc(name + " is flashGradTileAVX512 with d an output: d[r] = Σ P⊙dP over the row (D, for rows whose keys are all in the block), taken before the score gradients.")
	} else {
		Doc(name + " sets s[i] = P = exp(scale·s[i] − lse[r]) and ds[i] = P·(scale·ds[i] − scale·d[r]) on rows r < rows of ds and s (row stride ld) over their first min(n0+r, w) elements, and zeroes both rows on [max(that, 0), min(w, n0+r+pad)).")
	}
	pd, ps := ptr("ds"), ptr("s")
	ld := Load(Param("ld"), GP64()).(reg.GPVirtual)
	SHLQ(U8(2), ld)
	n0 := Load(Param("n0"), GP64()).(reg.GPVirtual)
	rows := Load(Param("rows"), GP64()).(reg.GPVirtual)
	scale := param("scale")
	hoist(expFlashConsts()...)
	TESTQ(rows, rows)
	JE(LabelRef(lb("fgt_done")))
	Label(lb("fgt_row"))
	w := Load(Param("w"), GP64()).(reg.GPVirtual)
	nv := GP64()
	MOVQ(n0, nv)
	CMPQ(nv, w)
	CMOVQGT(w, nv) // nv = min(n0, w)
	TESTQ(nv, nv)
	JLE(LabelRef(lb("fgt_zero")))
	{
		plse, pdd := ptr("lse"), ptr("d")
		lse, sd := ZMM(), ZMM()
		VBROADCASTSS(Mem{Base: plse}, lse)
		k, full := avxrow.TailMask(nv)
		if dot { // P and D = Σ P⊙dP first, then dS
			acc := zeroZ()
			avxrow.Loop(lb("p"), full, k, []reg.GPVirtual{pd, ps}, func() {
				t := load(ps)
				VFMSUB213PS(lse, scale, t)
				e := expFlash(t)
				VMOVUPS(e, mem(ps))
				VFMADD231PS(mem(pd), e, acc)
			}, func() {
				t, dp := ZMM(), ZMM()
				VMOVUPS_Z(mem(ps), k, t)
				VMOVUPS_Z(mem(pd), k, dp)
				VFMSUB213PS(lse, scale, t)
				e := expFlash(t)
				VMOVUPS(e, k, mem(ps))
				VFMADD231PS(dp, e, k, acc)
			})
			reduce(acc, VADDPS)
			storeLane0(acc, mem(pdd))
			VMULPS(scale, acc, sd) // scale·D
			avxrow.Loop(lb("ds"), full, k, []reg.GPVirtual{pd, ps}, func() {
				dp := load(pd)
				VFMSUB213PS(sd, scale, dp) // scale·dP − scale·D
				VMULPS(mem(ps), dp, dp)
				VMOVUPS(dp, mem(pd))
			}, func() {
				dp, e := ZMM(), ZMM()
				VMOVUPS_Z(mem(pd), k, dp)
				VMOVUPS_Z(mem(ps), k, e)
				VFMSUB213PS(sd, scale, dp)
				VMULPS(e, dp, dp)
				VMOVUPS(dp, k, mem(pd))
			})
			JMP(LabelRef(lb("fgt_zero")))
		}
		VBROADCASTSS(Mem{Base: pdd}, sd)
		VMULPS(scale, sd, sd) // scale·D
		grad := func(t, dp reg.VecVirtual) reg.VecVirtual {
			VFMSUB213PS(lse, scale, t) // t = scale·s − lse
			e := expFlash(t)
			VFMSUB213PS(sd, scale, dp) // scale·dP − scale·D
			VMULPS(e, dp, dp)
			return e
		}
		avxrow.Loop(lb("g"), full, k, []reg.GPVirtual{pd, ps}, func() {
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
	}
	Label(lb("fgt_zero"))
	{
		// Zero [lo, hi): lo = max(nv, 0), hi = min(w, n0+pad).
		lo, hi := GP64(), GP64()
		XORQ(lo, lo)
		CMPQ(nv, lo)
		CMOVQGT(nv, lo)
		pad := Load(Param("pad"), GP64()).(reg.GPVirtual)
		MOVQ(n0, hi)
		ADDQ(pad, hi)
		w2 := Load(Param("w"), GP64()).(reg.GPVirtual)
		CMPQ(hi, w2)
		CMOVQGT(w2, hi)
		SUBQ(lo, hi) // the count
		JLE(LabelRef(lb("fgt_next")))
		pz := GP64()
		LEAQ(Mem{Base: ps, Index: lo, Scale: 4}, pz)
		zeroRange(lb("zs"), pz, hi)
		LEAQ(Mem{Base: pd, Index: lo, Scale: 4}, pz)
		zeroRange(lb("zd"), pz, hi)
	}
	Label(lb("fgt_next"))
	ADDQ(ld, ps)
	ADDQ(ld, pd)
	for _, name := range []string{"lse", "d"} {
		b, err := Param(name).Resolve()
		if err != nil {
			panic(err)
		}
		ADDQ(U32(4), b.Addr)
	}
	INCQ(n0)
	DECQ(rows)
	JNE(LabelRef(lb("fgt_row")))
	Label(lb("fgt_done"))
	VZEROUPPER()
	RET()
}

// expMagic is 1.5·2²³ + 127: added to t·log₂e it rounds to the nearest
// integer n (to even on ties, as VRNDSCALEPS does) and leaves n + 127,
// the biased exponent of 2ⁿ, in the low bits of the sum (shifted left
// 23: the bits of 2ⁿ).
const expMagic = 12583039

// expFlash is e^t for the flash tiles, in fewer vector operations than
// exp (all of them compete for the two pipes that run 512-bit arithmetic
// here): t clamped below only (at −87.3, so that 2ⁿ stays normal; the
// flash tiles never exceed t = 0 by more than a rounding, and lanes past
// a row's end are discarded), n and 2ⁿ by the magic-number trick
// (expMagic; e = p·2ⁿ is exact, as VSCALEFPS's is, for n >= −126), r = t − n·ln2 with ln2 in one float (its rounding, 2e-9, moves
// e^t by at most 2.4e-7 relative at n = −126, where e^t < 1e-37), and
// Cephes' polynomial as one Horner chain of degree 7 (the same
// coefficients, then r and 1: 1 + r + r²·P(r)). Measured on L1 data:
// 2.03 ns a vector against 2.50 for exp's sequence with the magic-number
// rounding in place of VRNDSCALEPS and VSCALEFPS (which took 2.9–3.3).
func expFlash(t reg.VecVirtual) reg.VecVirtual {
	VMAXPS(bcast(-87.3), t, t)
	j := copyZ(bcast(expMagic))
	VFMADD231PS(bcast(1.44269504088896341), t, j) // j = t·log₂e + magic
	n := ZMM()
	VSUBPS(bcast(expMagic), j, n)                 // n = round(t·log₂e)
	VFNMADD231PS(bcast(0.6931471805599453), n, t) // r = t − n·ln2
	poly := coef.ExpPoly()
	p := copyZ(bcast(poly[0]))
	for _, c := range append(poly[1:], 1, 1) {
		VFMADD213PS(bcast(c), t, p) // p = r·p + c
	}
	VPSLLD(U8(23), j, j) // 2ⁿ
	VMULPS(j, p, p)
	return p
}

// expFlashConsts are the constants of expFlash.
func expFlashConsts() []float32 {
	return append([]float32{-87.3, expMagic, 1.44269504088896341, 0.6931471805599453, 1}, coef.ExpPoly()...)
}

// flashFinishK emits
//
//	flashFinishAVX512(m, l *float32, rows int, lse, inv *float32)
//
// the end of the flash forward's online softmax for rows r < rows:
// inv[r] = 1/l[r] and lse[r] = m[r] + ln l[r] (l >= 1, as the sum
// includes exp(0) for the row's maximum), 16 rows a vector. ln is
// Cephes' logf, as log32: l = 2^e·x with x in [√½, √2) (VGETEXPPS,
// VGETMANTPS), ln x = f − f²/2 + f³·P(f) for f = x − 1, plus e·ln2 in
// two parts.
func flashFinishK() {
	text("flashFinishAVX512", "func(m, l *float32, rows int, lse, inv *float32)")
	Doc("flashFinishAVX512 sets inv[r] = 1/l[r] and lse[r] = m[r] + ln l[r] for r < rows (l[r] >= 1).")
	pm, pl, plse, pinv := ptr("m"), ptr("l"), ptr("lse"), ptr("inv")
	rows := Load(Param("rows"), GP64()).(reg.GPVirtual)
	k, full := avxrow.TailMask(rows)
	finish := func(ld func(p reg.GPVirtual) reg.VecVirtual, st func(z reg.VecVirtual, p reg.GPVirtual)) {
		x := ld(pl)
		inv := copyZ(bcast(1))
		VDIVPS(x, inv, inv)
		st(inv, pinv)
		e, f := ZMM(), ZMM()
		VGETEXPPS(x, e)
		VGETMANTPS(U8(0), x, f) // [1, 2)
		big := K()
		VCMPPS(U8(0x1E), bcast(math.Sqrt2), f, big) // f > √2
		VMULPS(bcast(0.5), f, big, f)
		VADDPS(bcast(1), e, big, e)
		VSUBPS(bcast(1), f, f)
		z := ZMM()
		VMULPS(f, f, z)
		y := copyZ(bcast(7.0376836292e-2))
		for _, c := range []float32{-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
			-1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1} {
			VFMADD213PS(bcast(c), f, y) // y = y·f + c
		}
		VMULPS(f, y, y)
		VMULPS(z, y, y)
		VFMADD231PS(bcast(-2.12194440e-4), e, y) // y += c2·e
		VFMADD231PS(bcast(-0.5), z, y)           // y −= z/2
		VADDPS(f, y, y)
		VFMADD231PS(bcast(0.693359375), e, y) // + c1·e
		m := ld(pm)
		VADDPS(m, y, y)
		st(y, plse)
	}
	avxrow.Loop("ff", full, k, []reg.GPVirtual{pm, pl, plse, pinv}, func() {
		finish(load, func(z reg.VecVirtual, p reg.GPVirtual) { VMOVUPS(z, mem(p)) })
	}, func() {
		finish(func(p reg.GPVirtual) reg.VecVirtual {
			z := copyZ(bcast(1))
			VMOVUPS(mem(p), k, z) // masked lanes keep 1
			return z
		}, func(z reg.VecVirtual, p reg.GPVirtual) { VMOVUPS(z, k, mem(p)) })
	})
	VZEROUPPER()
	RET()
}
