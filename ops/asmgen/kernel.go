package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// kernel emits the micro-kernel
//
//	func(kc int, a *float32, sa int, b *float32, sb int, c *float32, ldc int, cols int, acc bool)
//
// computing C[i][j] (+)= Σ_{p<kc} a[p*sa + i] · b[p*sb + j] for i < mr and
// j < nv*lanes, C row-major with row stride ldc (strides in elements). So A
// may be a packed panel (sa = mr) or rows of Aᵀ in place (sa = lda), and B
// a packed panel (sb = nr) or rows of B in place (sb = ldb). A masked
// kernel (AVX-512) writes only columns j < cols of C, through the lane
// masks K1, K2, …; an unmasked one ignores cols (it must be nv*lanes). B
// is read in full rows of nv*lanes floats either way (a masked load costs
// an FMA-port uop on Intel, 8% of the kernel), so edge panels of B must be
// padded. With t.rowsA, A is read in place as rows (M,K) of row stride sa:
// the term is a[i*sa + p], for NN and NT without packing A.
//
// The sum is stored through an epilogue: C = Σ + src (src a tile of the
// same row stride as C: C itself to accumulate, another tile such as a
// residual, or nil for none), plus bias[j] where bias is not nil — in
// that case src + bias is rounded first, as if C had been set to it
// before accumulating. A nil src means C is never read.
func kernel(t tile) {
	nregs := 16
	if t.lanes == 16 {
		nregs = 32
	}
	nacc := t.mr * t.nv
	ntmp := nregs - nacc - t.nv
	if ntmp < 1 {
		panic(fmt.Sprintf("%s: %d accumulators and %d B registers exceed %d", t.name, nacc, t.nv, nregs))
	}
	acc := func(i, v int) reg.VecPhysical { return vec(t, i*t.nv+v) }
	breg := func(v int) reg.VecPhysical { return vec(t, nacc+v) }
	tmp := func(i int) reg.VecPhysical { return vec(t, nacc+t.nv+i%ntmp) }
	mask := func(v int) reg.OpmaskPhysical { return []reg.OpmaskPhysical{reg.K1, reg.K2, reg.K3, reg.K4}[v] }
	nr := t.nv * t.lanes

	TEXT(t.name, NOSPLIT, "func(kc int, a *float32, sa int, b *float32, sb int, c *float32, ldc int, cols int, src *float32, bias *float32)")
	aij := "a[p*sa+i]"
	if t.rowsA {
		aij = "a[i*sa+p]"
	}
	term := aij + "·b[p*sb+j]"
	if t.bf16 { // a and b hold dwords, each a pair (lo, hi) of bf16
		term = "a[p*sa+i].lo·b[p*sb+j].lo + a[p*sa+i].hi·b[p*sb+j].hi"
	}
	Doc(fmt.Sprintf("%s computes C[i][j] = Σ_p %s (+ src[i*ldc+j] + bias[j]) for i < %d, j < %s.", t.name, term, t.mr, map[bool]string{true: "cols", false: fmt.Sprint(nr)}[t.masked]))
	kc, pa, pb, pc, ldc, sa, sb := reg.RCX, reg.RAX, reg.RBX, reg.RDX, reg.RSI, reg.R8, reg.R9
	if t.masked { // lane masks: bits [16v, 16v+16) of 1<<cols - 1
		Load(Param("cols"), kc)
		MOVQ(U32(1), pa)
		SHLQ(reg.CL, pa)
		DECQ(pa)
		for v := 0; v < t.nv; v++ {
			KMOVW(reg.EAX, mask(v))
			if v < t.nv-1 {
				SHRQ(U8(16), pa)
			}
		}
	}
	Load(Param("kc"), kc)
	Load(Param("a"), pa)
	Load(Param("sa"), sa)
	Load(Param("b"), pb)
	Load(Param("sb"), sb)
	Load(Param("c"), pc)
	Load(Param("ldc"), ldc)
	SHLQ(U8(2), sa)
	SHLQ(U8(2), sb)
	SHLQ(U8(2), ldc)

	// Prefetch the C tile and a separate src tile, zero the accumulators.
	row := reg.RDI
	prefetch := func(base reg.Register) {
		MOVQ(base, row)
		for i := 0; i < t.mr; i++ {
			PREFETCHT0(Mem{Base: row})
			if nr*4 > 64 {
				PREFETCHT0(Mem{Base: row, Disp: nr*4 - 4})
			}
			if i < t.mr-1 {
				ADDQ(ldc, row)
			}
		}
	}
	prefetch(pc)
	src := reg.R10
	Load(Param("src"), src)
	TESTQ(src, src)
	JE(LabelRef(t.name + "_zero"))
	CMPQ(src, pc)
	JE(LabelRef(t.name + "_zero"))
	prefetch(src)
	Label(t.name + "_zero")
	for i := 0; i < t.mr; i++ {
		for v := 0; v < t.nv; v++ {
			zero(acc(i, v))
		}
	}

	// A's rows: packed or Aᵀ in place, row i of step p is at pa + 4i (pa
	// moving by sa each step); rows in place (t.rowsA), at pa + i*sa + 4p,
	// reached as base + s*sa for bases pa, pa+3sa, pa+6sa, pa+9sa (R11-R13)
	// and scales s of 0, 1, 2, 4, 8.
	bases := []reg.Register{pa, reg.R11, reg.R12, reg.R13}
	if t.rowsA {
		for k := 1; k < len(bases) && 3*k < t.mr; k++ {
			MOVQ(bases[k-1], bases[k])
			for range 3 {
				ADDQ(sa, bases[k])
			}
		}
	}
	aval := func(i, disp int) Mem {
		if !t.rowsA {
			return Mem{Base: pa, Disp: 4 * i}
		}
		b, s := rowAddr(i)
		m := Mem{Base: bases[b], Disp: disp}
		if s > 0 {
			m.Index, m.Scale = sa, uint8(s)
		}
		return m
	}
	advance := func(steps int) { // move A past steps k steps (rowsA only)
		for k := 0; k < len(bases) && 3*k < t.mr; k++ {
			ADDQ(U32(4*steps), bases[k])
		}
	}

	// One k step: load the B row, broadcast each A value against it.
	step := func(u, disp int) {
		for v := 0; v < t.nv; v++ {
			VMOVUPS(Mem{Base: pb, Disp: v * 4 * t.lanes}, breg(v))
		}
		for i := 0; i < t.mr; i++ {
			x := tmp(u*t.mr + i)
			if t.bf16 { // one dword: A's pair of k values for row i
				VPBROADCASTD(aval(i, disp), x)
				for v := 0; v < t.nv; v++ {
					VDPBF16PS(acc(i, v), breg(v), x)
				}
				continue
			}
			VBROADCASTSS(aval(i, disp), x)
			for v := 0; v < t.nv; v++ {
				VFMADD231PS(breg(v), x, acc(i, v))
			}
		}
		if !t.rowsA {
			ADDQ(sa, pa)
		}
		ADDQ(sb, pb)
	}

	SUBQ(U32(t.unroll), kc)
	JL(LabelRef(t.name + "_tail"))
	Label(t.name + "_loop")
	for u := 0; u < t.unroll; u++ {
		step(u, 4*u)
	}
	if t.rowsA {
		advance(t.unroll)
	}
	SUBQ(U32(t.unroll), kc)
	JGE(LabelRef(t.name + "_loop"))

	Label(t.name + "_tail")
	ADDQ(U32(t.unroll), kc)
	JE(LabelRef(t.name + "_store"))
	Label(t.name + "_one")
	step(0, 0)
	if t.rowsA {
		advance(1)
	}
	DECQ(kc)
	JNE(LabelRef(t.name + "_one"))

	Label(t.name + "_store")
	storeTile(t, pc, ldc, acc, breg, tmp, mask)
}

// storeTile writes the accumulators to C through the epilogue of kernel,
// under the lane masks if t.masked. Four variants, picked by which of src
// and bias are nil: bias goes to the B registers, a row of src to the
// temporaries.
func storeTile(t tile, pc, ldc reg.Register, acc func(i, v int) reg.VecPhysical, breg func(v int) reg.VecPhysical, tmp func(int) reg.VecPhysical, mask func(int) reg.OpmaskPhysical) {
	src, bias := reg.R10, reg.R11
	Load(Param("src"), src)
	Load(Param("bias"), bias)
	name := func(s string) string { return t.name + "_" + s }
	TESTQ(bias, bias)
	JE(LabelRef(name("nobias")))
	for v := 0; v < t.nv; v++ {
		m := Mem{Base: bias, Disp: v * 4 * t.lanes}
		if t.masked {
			VMOVUPS_Z(m, mask(v), breg(v))
		} else {
			VMOVUPS(m, breg(v))
		}
	}
	TESTQ(src, src)
	JE(LabelRef(name("bias")))
	variants := []struct {
		label          string
		withSrc, withB bool
	}{{"srcbias", true, true}, {"bias", false, true}, {"nobias", true, false}, {"overwrite", false, false}}
	for k, vr := range variants {
		if k > 0 {
			Label(name(vr.label))
		}
		if vr.label == "nobias" {
			TESTQ(src, src)
			JE(LabelRef(name("overwrite")))
		}
		MOVQ(pc, reg.RDI)
		for i := 0; i < t.mr; i++ {
			for v := 0; v < t.nv; v++ {
				m := Mem{Base: reg.RDI, Disp: v * 4 * t.lanes}
				ms := Mem{Base: src, Disp: v * 4 * t.lanes}
				switch {
				case vr.withSrc && vr.withB:
					x := tmp(v)
					if t.masked {
						VMOVUPS_Z(ms, mask(v), x)
					} else {
						VMOVUPS(ms, x)
					}
					VADDPS(breg(v), x, x)
					VADDPS(x, acc(i, v), acc(i, v))
				case vr.withSrc && t.masked:
					VMOVUPS_Z(ms, mask(v), tmp(v))
					VADDPS(tmp(v), acc(i, v), acc(i, v))
				case vr.withSrc:
					VADDPS(ms, acc(i, v), acc(i, v))
				case vr.withB:
					VADDPS(breg(v), acc(i, v), acc(i, v))
				}
				if t.masked {
					VMOVUPS(acc(i, v), mask(v), m)
				} else {
					VMOVUPS(acc(i, v), m)
				}
			}
			if i < t.mr-1 {
				ADDQ(ldc, reg.RDI)
				if vr.withSrc {
					ADDQ(ldc, src)
				}
			}
		}
		VZEROUPPER()
		RET()
	}
}

// rowAddr says how rowsA kernels reach row i (< 12) of A: bases[b] +
// s·stride, with base b at row 3b and s one of 0, 1, 2, 4, 8.
func rowAddr(i int) (b, s int) {
	switch i {
	case 0, 3, 6, 9:
		return i / 3, 0
	case 1, 2, 4, 8:
		return 0, i
	case 5, 7, 11:
		return 1, i - 3
	case 10:
		return 2, 4
	}
	panic(fmt.Sprintf("rowAddr: row %d", i))
}
