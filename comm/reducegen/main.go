// Command reducegen generates the AVX-512 assembly of package comm's fp32
// sum kernels with avo: d = ((x0 + x1) + x2) + x3, a = (((a + x0) + x1) +
// x2) + x3 and Avg's d = s·x over n >= 0 elements, sixteen lanes at a time
// and the tail under a mask. Each lane adds in the scalar loop's order, so the results
// are the scalar kernels' bit for bit. Run it through `go generate ./comm`.
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

func main() {
	ConstraintExpr("amd64")
	sum4("sum4F32AVX512", false)
	sum4("add4F32AVX512", true)
	scale()
	Generate()
}

// sum4 emits name(d, x0, x1, x2, x3 *float32, n int): d[i] = x0[i] + x1[i]
// + x2[i] + x3[i], or with acc d[i] += that, left to right.
func sum4(name string, acc bool) {
	TEXT(name, NOSPLIT, "func(d, x0, x1, x2, x3 *float32, n int)")
	Pragma("noescape")
	if acc {
		Doc(name + " sets d[i] = (((d[i] + x0[i]) + x1[i]) + x2[i]) + x3[i] for i < n.")
	} else {
		Doc(name + " sets d[i] = ((x0[i] + x1[i]) + x2[i]) + x3[i] for i < n (d may be any x).")
	}
	d := Load(Param("d"), GP64()).(reg.GPVirtual)
	xs := []reg.GPVirtual{
		Load(Param("x0"), GP64()).(reg.GPVirtual), Load(Param("x1"), GP64()).(reg.GPVirtual),
		Load(Param("x2"), GP64()).(reg.GPVirtual), Load(Param("x3"), GP64()).(reg.GPVirtual),
	}
	n := Load(Param("n"), GP64()).(reg.GPVirtual)

	k, rem, full := tailMask(n)

	fold := func(masked bool) {
		s := ZMM()
		ld := func(p reg.GPVirtual, z reg.VecVirtual) {
			if masked {
				VMOVUPS_Z(Mem{Base: p}, k, z)
			} else {
				VMOVUPS(Mem{Base: p}, z)
			}
		}
		first := 0
		if acc {
			ld(d, s)
		} else {
			ld(xs[0], s)
			first = 1
		}
		for _, x := range xs[first:] {
			t := ZMM()
			ld(x, t)
			VADDPS(t, s, s) // s = s + x: the scalar loop's order
		}
		if masked {
			VMOVUPS(s, k, Mem{Base: d})
		} else {
			VMOVUPS(s, Mem{Base: d})
		}
	}
	rows(name, full, rem, append([]reg.GPVirtual{d}, xs...), func() { fold(false) }, func() { fold(true) })
	VZEROUPPER()
	RET()
}

// scale emits scaleF32AVX512(d, x *float32, n int, s float32): d[i] =
// s·x[i] (Avg's last step; d may be x).
func scale() {
	TEXT("scaleF32AVX512", NOSPLIT, "func(d, x *float32, n int, s float32)")
	Pragma("noescape")
	Doc("scaleF32AVX512 sets d[i] = s·x[i] for i < n (d may be x).")
	d := Load(Param("d"), GP64()).(reg.GPVirtual)
	x := Load(Param("x"), GP64()).(reg.GPVirtual)
	n := Load(Param("n"), GP64()).(reg.GPVirtual)
	sv := ZMM()
	b, err := Param("s").Resolve()
	if err != nil {
		panic(err)
	}
	VBROADCASTSS(b.Addr, sv)
	k, rem, full := tailMask(n)
	rows("scaleF32AVX512", full, rem, []reg.GPVirtual{d, x}, func() {
		t := ZMM()
		VMULPS(Mem{Base: x}, sv, t)
		VMOVUPS(t, Mem{Base: d})
	}, func() {
		t := ZMM()
		VMOVUPS_Z(Mem{Base: x}, k, t)
		VMULPS(sv, t, t)
		VMOVUPS(t, k, Mem{Base: d})
	})
	VZEROUPPER()
	RET()
}

// tailMask returns the mask of the n%16 lowest lanes, n%16 and n &^ 15.
func tailMask(n reg.GPVirtual) (k reg.OpmaskVirtual, rem, full reg.GPVirtual) {
	rem, bits := GP64(), GP64()
	MOVQ(n, rem)
	ANDQ(U32(15), rem)
	MOVQ(U32(1), bits)
	SHLXQ(rem, bits, bits)
	DECQ(bits)
	k = K()
	KMOVW(bits.As32(), k)
	full = GP64()
	MOVQ(n, full)
	ANDQ(I32(-16), full)
	return k, rem, full
}

// rows emits `for ; full > 0; full -= 16 { body(); ptrs += 64 }`, then
// tail() when rem > 0. Labels start with name.
func rows(name string, full, rem reg.GPVirtual, ptrs []reg.GPVirtual, body, tail func()) {
	TESTQ(full, full)
	JE(LabelRef(name + "_tail"))
	Label(name + "_loop")
	body()
	for _, p := range ptrs {
		ADDQ(U32(64), p)
	}
	SUBQ(U32(16), full)
	JNE(LabelRef(name + "_loop"))
	Label(name + "_tail")
	TESTQ(rem, rem)
	JE(LabelRef(name + "_done"))
	tail()
	Label(name + "_done")
}
