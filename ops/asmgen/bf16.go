package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// vdpbf16ps returns the EVEX encoding of VDPBF16PS zmm<dst>, zmm<src1>,
// zmm<src2> (Intel operand order, register form, no mask): for each of
// the 16 fp32 lanes i,
//
//	dst[i] += src1.bf16[2i+1]·src2.bf16[2i+1] + src1.bf16[2i]·src2.bf16[2i]
//
// EVEX.512.F3.0F38.W0 52 /r. The four EVEX bytes, 62 P0 P1 P2:
//
//	P0 = R̄ X̄ B̄ R̄' 0 0 m m   R̄, R̄' invert bits 3, 4 of dst (ModRM.reg);
//	                        B̄, X̄ invert bits 3, 4 of src2 (ModRM.rm, a
//	                        register); mm = 10 selects map 0F38
//	P1 = W v̄v̄v̄v̄ 1 p p       W = 0; vvvv = src1 bits 0-3, inverted; pp = 10 (F3)
//	P2 = z L'L b V̄' a a a   z = 0; L'L = 10 (512 bits); b = 0; V̄' inverts
//	                        bit 4 of src1; aaa = 000 (no mask)
//
// then the opcode 52 and ModRM = 11 dst[2:0] src2[2:0]. Go's assembler
// has no mnemonic for it, so the kernels carry these bytes; asmgen's test
// holds them to GNU as.
func vdpbf16ps(dst, src1, src2 int) []byte {
	if dst < 0 || dst > 31 || src1 < 0 || src1 > 31 || src2 < 0 || src2 > 31 {
		panic(fmt.Sprintf("vdpbf16ps: registers %d, %d, %d out of zmm0-zmm31", dst, src1, src2))
	}
	p0 := byte(0x02) // map 0F38
	if dst&8 == 0 {
		p0 |= 0x80
	}
	if src2&16 == 0 {
		p0 |= 0x40
	}
	if src2&8 == 0 {
		p0 |= 0x20
	}
	if dst&16 == 0 {
		p0 |= 0x10
	}
	p1 := byte(^src1&15)<<3 | 0x04 | 0x02 // W0, vvvv, fixed 1, pp = F3
	p2 := byte(0x40)                      // L'L = 512
	if src1&16 == 0 {
		p2 |= 0x08
	}
	return []byte{0x62, p0, p1, p2, 0x52, 0xc0 | byte(dst&7)<<3 | byte(src2&7)}
}

// VDPBF16PS emits dst += dot of bf16 pairs of src1 and src2 (see
// vdpbf16ps) as raw bytes, after a comment naming the instruction.
func VDPBF16PS(dst, src1, src2 reg.VecPhysical) {
	Comment(fmt.Sprintf("VDPBF16PS %s, %s, %s", src2.Asm(), src1.Asm(), dst.Asm()))
	for _, b := range vdpbf16ps(zNum(dst), zNum(src1), zNum(src2)) {
		Instruction(&ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(b)}})
	}
}

// zNum is the number of a zmm register.
func zNum(r reg.VecPhysical) int {
	if r.Size() != 64 {
		panic(fmt.Sprintf("VDPBF16PS: %s is not a zmm register", r.Asm()))
	}
	return int(r.PhysicalIndex())
}

// dotLoop emits a function running n iterations of nacc independent
// VDPBF16PS (64 flops each: 16 lanes, 2 products, 2 flops), the peak of
// the bf16 micro-kernels.
func dotLoop(name string, nacc int) {
	t := tile{lanes: 16}
	TEXT(name, NOSPLIT, "func(n int)")
	Doc(fmt.Sprintf("%s runs n iterations of %d independent VDPBF16PS (%d flops each iteration).", name, nacc, 64*nacc))
	n := reg.RCX
	Load(Param("n"), n)
	for i := 0; i < nacc+2; i++ {
		zero(vec(t, i))
	}
	TESTQ(n, n)
	JLE(LabelRef(name + "_done"))
	Label(name + "_loop")
	for i := 0; i < nacc; i++ {
		VDPBF16PS(vec(t, i), vec(t, nacc), vec(t, nacc+1))
	}
	DECQ(n)
	JNE(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// pairRows emits
//
//	pairRows32(src *uint16, ld int, dst *float32, steps int)
//
// the packing of a 32-column panel of a p-major bf16 operand into pairs
// of k: for s < steps and j < 32, dst dword s*32+j = src[2s*ld + j] |
// src[(2s+1)*ld + j] << 16 (two rows zero-extended, the second shifted
// into the high halves).
func pairRows(name string) {
	TEXT(name, NOSPLIT, "func(src *uint16, ld int, dst *float32, steps int)")
	Doc(fmt.Sprintf("%s writes dst dword s*32+j = src[2s*ld+j] | src[(2s+1)*ld+j]<<16 for s < steps, j < 32.", name))
	src, ld, dst, n, row1 := reg.RSI, reg.RDX, reg.RDI, reg.RCX, reg.R8
	Load(Param("src"), src)
	Load(Param("ld"), ld)
	Load(Param("dst"), dst)
	Load(Param("steps"), n)
	SHLQ(U8(1), ld) // bytes per row
	TESTQ(n, n)
	JLE(LabelRef(name + "_done"))
	Label(name + "_loop")
	MOVQ(src, row1)
	ADDQ(ld, row1)
	VPMOVZXWD(Mem{Base: src}, reg.Z0)
	VPMOVZXWD(Mem{Base: src, Disp: 32}, reg.Z1)
	VPMOVZXWD(Mem{Base: row1}, reg.Z2)
	VPMOVZXWD(Mem{Base: row1, Disp: 32}, reg.Z3)
	VPSLLD(U8(16), reg.Z2, reg.Z2)
	VPSLLD(U8(16), reg.Z3, reg.Z3)
	VPORD(reg.Z2, reg.Z0, reg.Z0)
	VPORD(reg.Z3, reg.Z1, reg.Z1)
	VMOVUPS(reg.Z0, Mem{Base: dst})
	VMOVUPS(reg.Z1, Mem{Base: dst, Disp: 64})
	ADDQ(ld, src)
	ADDQ(ld, src)
	ADDQ(U32(128), dst)
	DECQ(n)
	JNE(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// widen emits
//
//	name(dst *float32, src *uint16, n int)
//
// dst[i] = src[i] widened to fp32 for i < n (n a multiple of 16), from
// fp16 with VCVTPH2PS (exact, subnormals included) or from bf16 by
// zero-extending each value into the high half of a dword.
func widen(name string, f16 bool) {
	TEXT(name, NOSPLIT, "func(dst *float32, src *uint16, n int)")
	from := "bf16"
	if f16 {
		from = "fp16"
	}
	Doc(fmt.Sprintf("%s sets dst[i] = float32(src[i]) for i < n (n a multiple of 16), src holding %s bits.", name, from))
	dst, src, n := reg.RDI, reg.RSI, reg.RCX
	Load(Param("dst"), dst)
	Load(Param("src"), src)
	Load(Param("n"), n)
	SHRQ(U8(4), n)
	TESTQ(n, n)
	JLE(LabelRef(name + "_done"))
	Label(name + "_loop")
	if f16 {
		VCVTPH2PS(Mem{Base: src}, reg.Z0)
	} else {
		VPMOVZXWD(Mem{Base: src}, reg.Z0)
		VPSLLD(U8(16), reg.Z0, reg.Z0)
	}
	VMOVUPS(reg.Z0, Mem{Base: dst})
	ADDQ(U32(32), src)
	ADDQ(U32(64), dst)
	DECQ(n)
	JNE(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
