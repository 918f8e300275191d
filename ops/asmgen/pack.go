package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// transpose16 emits a function that transposes rows (12 or 16) rows of
// 16*n floats, src with row stride ld (elements), into dst with row stride
// w: dst[c*w + r] = src[r*ld + c] for r < rows, c < 16*n. Each 16×16 block
// is transposed in registers (unpack, shufps, two rounds of 128-bit lane
// shuffles); with 12 rows only 12 lanes of each output row are stored.
func transpose16(name string, rows, w int) {
	t := tile{lanes: 16}
	TEXT(name, NOSPLIT, "func(src *float32, ld int, dst *float32, n int)")
	Doc(fmt.Sprintf("%s writes dst[c*%d + r] = src[r*ld + c] for r < %d, c < 16*n.", name, w, rows))
	src, ld, dst, n, p := reg.RSI, reg.RDX, reg.RDI, reg.RCX, reg.R8
	Load(Param("src"), src)
	Load(Param("ld"), ld)
	Load(Param("dst"), dst)
	Load(Param("n"), n)
	SHLQ(U8(2), ld)
	if rows < 16 {
		MOVL(U32(1<<rows-1), reg.EAX)
		KMOVW(reg.EAX, reg.K1)
	}
	r := func(i int) reg.VecPhysical { return vec(t, i) }
	x := func(i int) reg.VecPhysical { return vec(t, 16+i) }
	TESTQ(n, n)
	JLE(LabelRef(name + "_done"))
	Label(name + "_loop")
	MOVQ(src, p)
	for i := 0; i < 16; i++ {
		if i >= rows {
			VPXORD(r(i), r(i), r(i))
			continue
		}
		VMOVUPS(Mem{Base: p}, r(i))
		if i < rows-1 {
			ADDQ(ld, p)
		}
	}
	for i := 0; i < 8; i++ {
		VUNPCKLPS(r(2*i+1), r(2*i), x(2*i))
		VUNPCKHPS(r(2*i+1), r(2*i), x(2*i+1))
	}
	for b := 0; b < 4; b++ {
		VSHUFPS(U8(0x44), x(4*b+2), x(4*b), r(4*b))
		VSHUFPS(U8(0xEE), x(4*b+2), x(4*b), r(4*b+1))
		VSHUFPS(U8(0x44), x(4*b+3), x(4*b+1), r(4*b+2))
		VSHUFPS(U8(0xEE), x(4*b+3), x(4*b+1), r(4*b+3))
	}
	for h := 0; h < 16; h += 8 {
		for j := 0; j < 4; j++ {
			VSHUFF32X4(U8(0x88), r(h+4+j), r(h+j), x(h+j))
			VSHUFF32X4(U8(0xDD), r(h+4+j), r(h+j), x(h+4+j))
		}
	}
	for j := 0; j < 8; j++ {
		VSHUFF32X4(U8(0x88), x(8+j), x(j), r(j))
		VSHUFF32X4(U8(0xDD), x(8+j), x(j), r(8+j))
	}
	for c := 0; c < 16; c++ {
		m := Mem{Base: dst, Disp: c * w * 4}
		if rows < 16 {
			VMOVUPS(r(c), reg.K1, m)
		} else {
			VMOVUPS(r(c), m)
		}
	}
	ADDQ(U32(64), src)
	ADDQ(U32(16*w*4), dst)
	DECQ(n)
	JNE(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// copyPanels emits a function that copies rows rows of np*w floats, src
// with row stride ld (elements), into np panels of rows×w floats:
// dst[q*w*rows + r*w + j] = src[r*ld + q*w + j]. It walks src row by row.
// A width of 12 moves 12 lanes of a zmm under mask K1 (loads past the
// panel are suppressed, so it never reads beyond src's last row).
func copyPanels(name string, w int) {
	TEXT(name, NOSPLIT, "func(src *float32, ld int, dst *float32, rows, np int)")
	Doc(fmt.Sprintf("%s writes dst[q*%d*rows + r*%d + j] = src[r*ld + q*%d + j] for r < rows, q < np, j < %d.", name, w, w, w, w))
	src, ld, dst, rows, np := reg.RSI, reg.RDX, reg.RDI, reg.RCX, reg.R8
	stride, s, d, q := reg.R9, reg.R10, reg.R11, reg.R12
	Load(Param("src"), src)
	Load(Param("ld"), ld)
	Load(Param("dst"), dst)
	Load(Param("rows"), rows)
	Load(Param("np"), np)
	SHLQ(U8(2), ld)
	IMUL3Q(U32(w*4), rows, stride)

	if w%16 != 0 {
		MOVL(U32(1<<(w%16)-1), reg.EAX)
		KMOVW(reg.EAX, reg.K1)
	}
	TESTQ(rows, rows)
	JLE(LabelRef(name + "_done"))
	TESTQ(np, np)
	JLE(LabelRef(name + "_done"))
	Label(name + "_row")
	MOVQ(src, s)
	MOVQ(dst, d)
	MOVQ(np, q)
	Label(name + "_panel")
	for v := 0; v < w/16; v++ {
		VMOVUPS(Mem{Base: s, Disp: 64 * v}, vec(tile{lanes: 16}, v))
		VMOVUPS(vec(tile{lanes: 16}, v), Mem{Base: d, Disp: 64 * v})
	}
	if w%16 != 0 {
		x := vec(tile{lanes: 16}, 3)
		VMOVUPS_Z(Mem{Base: s, Disp: 64 * (w / 16)}, reg.K1, x)
		VMOVUPS(x, reg.K1, Mem{Base: d, Disp: 64 * (w / 16)})
	}
	ADDQ(U32(w*4), s)
	ADDQ(stride, d)
	DECQ(q)
	JNE(LabelRef(name + "_panel"))
	ADDQ(ld, src)
	ADDQ(U32(w*4), dst)
	DECQ(rows)
	JNE(LabelRef(name + "_row"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
