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

	"trellis/internal/avxrow"
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

	k, full := avxrow.TailMask(n)

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
	avxrow.Loop(name, full, k, append([]reg.GPVirtual{d}, xs...), func() { fold(false) }, func() { fold(true) })
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
	k, full := avxrow.TailMask(n)
	avxrow.Loop("scaleF32AVX512", full, k, []reg.GPVirtual{d, x}, func() {
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
