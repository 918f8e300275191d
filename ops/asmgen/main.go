// Command asmgen generates the amd64 assembly of package ops with avo: the
// fp32 GEMM micro-kernels (AVX-512 and AVX2+FMA) and the FMA loops that
// measure peak GFLOP/s. Run it through `go generate ./ops`.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// tile describes one micro-kernel: mr rows of C (broadcast from packed A)
// by nv vectors of lanes columns (loaded from packed B).
type tile struct {
	name   string
	mr, nv int
	lanes  int // float32 per vector: 16 (zmm) or 8 (ymm)
	unroll int // k steps per loop iteration
}

func main() {
	ConstraintExpr("amd64")
	for _, t := range tiles {
		kernel(t)
	}
	transpose16("transposeAVX512_16x32", 16, 32)
	transpose16("transposeAVX512_12x12", 12, 12)
	copyPanels("copyPanelsAVX512_12", 12)
	copyPanels("copyPanelsAVX512_32", 32)
	fmaLoop("fmaLoopAVX512", 16, 24)
	fmaLoop("fmaLoopAVX2", 8, 12)
	Generate()
}

// tiles are the micro-kernels. 12×32 keeps 24 zmm accumulators, two zmm
// of B and six broadcast registers: per k step 24 FMAs against 2 loads and
// 12 broadcasts, so the two FMA pipes, not the load ports, set the pace.
// (14×32, 6×64 and 8×48 measured the same in the kernel and no better in
// the driver; 12×32 packs A in fewer, wider panels.) 6×16 is its AVX2
// counterpart in 16 ymm registers.
var tiles = []tile{
	{name: "gemmAVX512_12x32", mr: 12, nv: 2, lanes: 16, unroll: 4},
	{name: "gemmAVX2_6x16", mr: 6, nv: 2, lanes: 8, unroll: 4},
}

// vec returns vector register i of the tile's width.
func vec(t tile, i int) reg.VecPhysical {
	if t.lanes == 16 {
		return []reg.VecPhysical{reg.Z0, reg.Z1, reg.Z2, reg.Z3, reg.Z4, reg.Z5, reg.Z6, reg.Z7,
			reg.Z8, reg.Z9, reg.Z10, reg.Z11, reg.Z12, reg.Z13, reg.Z14, reg.Z15,
			reg.Z16, reg.Z17, reg.Z18, reg.Z19, reg.Z20, reg.Z21, reg.Z22, reg.Z23,
			reg.Z24, reg.Z25, reg.Z26, reg.Z27, reg.Z28, reg.Z29, reg.Z30, reg.Z31}[i]
	}
	return []reg.VecPhysical{reg.Y0, reg.Y1, reg.Y2, reg.Y3, reg.Y4, reg.Y5, reg.Y6, reg.Y7,
		reg.Y8, reg.Y9, reg.Y10, reg.Y11, reg.Y12, reg.Y13, reg.Y14, reg.Y15}[i]
}

// zero clears a vector register: VPXORD for zmm (AVX512F; VXORPS on zmm
// would need AVX512DQ), VXORPS for ymm.
func zero(r reg.VecPhysical) {
	if r.Size() == 64 {
		VPXORD(r, r, r)
		return
	}
	VXORPS(r, r, r)
}

// kernel emits C[0:mr, 0:nv*lanes] (+)= Apanel·Bpanel over kc steps, where
// the packed A panel holds mr floats per k step and the packed B panel
// nv*lanes floats per k step. acc false overwrites C without reading it.
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
	vbytes := 4 * t.lanes
	nr := t.nv * t.lanes

	TEXT(t.name, NOSPLIT, "func(kc int, a, b, c *float32, ldc int, acc bool)")
	Doc(fmt.Sprintf("%s computes the %dx%d tile C (+)= A·B from packed panels: A holds %d floats per k step, B %d.", t.name, t.mr, nr, t.mr, nr))
	kc, pa, pb, pc, ldc := reg.RCX, reg.RAX, reg.RBX, reg.RDX, reg.RSI
	Load(Param("kc"), kc)
	Load(Param("a"), pa)
	Load(Param("b"), pb)
	Load(Param("c"), pc)
	Load(Param("ldc"), ldc)
	SHLQ(U8(2), ldc)

	// Prefetch the C tile, zero the accumulators.
	row := reg.RDI
	MOVQ(pc, row)
	for i := 0; i < t.mr; i++ {
		PREFETCHT0(Mem{Base: row})
		if nr*4 > 64 {
			PREFETCHT0(Mem{Base: row, Disp: nr*4 - 4})
		}
		if i < t.mr-1 {
			ADDQ(ldc, row)
		}
	}
	for i := 0; i < t.mr; i++ {
		for v := 0; v < t.nv; v++ {
			zero(acc(i, v))
		}
	}

	step := func(u int) {
		for v := 0; v < t.nv; v++ {
			VMOVUPS(Mem{Base: pb, Disp: u*nr*4 + v*vbytes}, breg(v))
		}
		for i := 0; i < t.mr; i++ {
			x := tmp(u*t.mr + i)
			VBROADCASTSS(Mem{Base: pa, Disp: (u*t.mr + i) * 4}, x)
			for v := 0; v < t.nv; v++ {
				VFMADD231PS(breg(v), x, acc(i, v))
			}
		}
	}

	SUBQ(U32(t.unroll), kc)
	JL(LabelRef(t.name + "_tail"))
	Label(t.name + "_loop")
	for u := 0; u < t.unroll; u++ {
		step(u)
	}
	ADDQ(U32(t.unroll*t.mr*4), pa)
	ADDQ(U32(t.unroll*nr*4), pb)
	SUBQ(U32(t.unroll), kc)
	JGE(LabelRef(t.name + "_loop"))

	Label(t.name + "_tail")
	ADDQ(U32(t.unroll), kc)
	JE(LabelRef(t.name + "_store"))
	Label(t.name + "_one")
	step(0)
	ADDQ(U32(t.mr*4), pa)
	ADDQ(U32(nr*4), pb)
	DECQ(kc)
	JNE(LabelRef(t.name + "_one"))

	Label(t.name + "_store")
	flag := reg.R8B
	Load(Param("acc"), flag)
	TESTB(flag, flag)
	JE(LabelRef(t.name + "_overwrite"))
	for i := 0; i < t.mr; i++ {
		for v := 0; v < t.nv; v++ {
			m := Mem{Base: pc, Disp: v * vbytes}
			VADDPS(m, acc(i, v), acc(i, v))
			VMOVUPS(acc(i, v), m)
		}
		if i < t.mr-1 {
			ADDQ(ldc, pc)
		}
	}
	VZEROUPPER()
	RET()

	Label(t.name + "_overwrite")
	for i := 0; i < t.mr; i++ {
		for v := 0; v < t.nv; v++ {
			VMOVUPS(acc(i, v), Mem{Base: pc, Disp: v * vbytes})
		}
		if i < t.mr-1 {
			ADDQ(ldc, pc)
		}
	}
	VZEROUPPER()
	RET()
}

// fmaLoop emits a function running n iterations of nacc independent
// vector FMAs (2*lanes*nacc flops per iteration), the peak the micro-kernels
// are measured against.
func fmaLoop(name string, lanes, nacc int) {
	t := tile{lanes: lanes}
	TEXT(name, NOSPLIT, "func(n int)")
	Doc(fmt.Sprintf("%s runs n iterations of %d independent %d-lane FMAs (%d flops each iteration).", name, nacc, lanes, 2*lanes*nacc))
	n := reg.RCX
	Load(Param("n"), n)
	for i := 0; i < nacc+2; i++ {
		zero(vec(t, i))
	}
	TESTQ(n, n)
	JLE(LabelRef(name + "_done"))
	Label(name + "_loop")
	for i := 0; i < nacc; i++ {
		VFMADD231PS(vec(t, nacc), vec(t, nacc+1), vec(t, i))
	}
	DECQ(n)
	JNE(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

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
