// Package avxrow is what the avo generators of the vector kernels
// (ops/vecgen, ops/avx2gen, comm/reducegen) share: the tail mask of an
// AVX-512 row of any length, the loop over its full vectors then its
// masked tail, and the loop over a length that is a multiple of the
// vector. It runs at build time only (go generate).
package avxrow

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// TailMask returns a mask of the n%16 lowest lanes (all zero when 16
// divides n) and the count of elements before the tail, n &^ 15.
func TailMask(n reg.GPVirtual) (reg.OpmaskVirtual, reg.GPVirtual) {
	rem, bits := GP64(), GP64()
	MOVQ(n, rem)
	ANDQ(U32(15), rem)
	MOVQ(U32(1), bits)
	SHLXQ(rem, bits, bits)
	DECQ(bits)
	k := K()
	KMOVW(bits.As32(), k)
	full := GP64()
	MOVQ(n, full)
	ANDQ(I32(-16), full)
	return k, full
}

// Loop emits `for c := full; c > 0; c -= 16 { body(); ptrs += 64 }`
// followed, when the tail mask is not empty, by tail() at the pointers'
// final position; the pointers are moved back to their start afterwards.
// Labels start with name.
func Loop(name string, full reg.GPVirtual, k reg.OpmaskVirtual, ptrs []reg.GPVirtual, body, tail func()) {
	c := GP64()
	MOVQ(full, c)
	TESTQ(c, c)
	JE(LabelRef(name + "_tail"))
	Label(name + "_loop")
	body()
	for _, p := range ptrs {
		ADDQ(U32(64), p)
	}
	SUBQ(U32(16), c)
	JNE(LabelRef(name + "_loop"))
	Label(name + "_tail")
	KORTESTW(k, k)
	JE(LabelRef(name + "_end"))
	tail()
	Label(name + "_end")
	back := GP64()
	MOVQ(full, back)
	SHLQ(U8(2), back)
	for _, p := range ptrs {
		SUBQ(back, p)
	}
}

// Counted emits `for ; n > 0; n -= lanes { body(); ptrs += 4·lanes }` with
// n the argument "n" (a multiple of lanes, the fp32 lanes of the vector:
// 16 for AVX-512, 8 for AVX2). Labels start with name.
func Counted(name string, lanes int, ptrs []reg.GPVirtual, body func()) {
	n := Load(Param("n"), GP64())
	TESTQ(n, n)
	JE(LabelRef(name + "_done"))
	Label(name + "_loop")
	body()
	for _, p := range ptrs {
		ADDQ(U32(4*lanes), p)
	}
	SUBQ(U32(lanes), n)
	JNE(LabelRef(name + "_loop"))
	Label(name + "_done")
}
