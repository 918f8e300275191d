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
	lanes  int  // float32 per vector: 16 (zmm) or 8 (ymm)
	unroll int  // k steps per loop iteration
	masked bool // column edges through AVX-512 lane masks
	rowsA  bool // A read in place as rows, a[i*sa + p]
	// bf16: A and B are packed bf16 pairs of k, one dword per (pair, row
	// or column); kc counts pairs and the step is VDPBF16PS.
	bf16 bool
}

// The AVX-512 micro-kernels are 12×32: 24 zmm accumulators, two zmm of B
// and six broadcast registers; per k step 24 FMAs against 2 loads and 12
// broadcasts, so the two FMA pipes, not the load ports, set the pace.
// (14×32, 6×64 and 8×48 measured the same in the kernel and no better in
// the driver.) Kernels of 1 to 11 rows finish the last rows of C without
// padding, and lane masks its last columns; the "r" kernels read A's rows
// in place (NN, NT) where packing A would not pay; the 16-column "r"
// kernels finish score rows that end within a half tile (causal
// attention's diagonal), at half the FMAs of a masked 32-column one. 6×16 is the AVX2 counterpart in
// 16 ymm registers; its driver pads edge tiles instead.
func main() {
	ConstraintExpr("amd64")
	for mr := 1; mr <= 12; mr++ { // one AVX-512 kernel per row count
		kernel(tile{name: fmt.Sprintf("gemmAVX512_%dx32", mr), mr: mr, nv: 2, lanes: 16, unroll: 4, masked: true})
		kernel(tile{name: fmt.Sprintf("gemmAVX512_%dx32r", mr), mr: mr, nv: 2, lanes: 16, unroll: 4, masked: true, rowsA: true})
	}
	for mr := 1; mr <= 12; mr++ { // 16 columns, rows in place: the diagonal edges of causal attention's scores
		kernel(tile{name: fmt.Sprintf("gemmAVX512_%dx16r", mr), mr: mr, nv: 1, lanes: 16, unroll: 4, masked: true, rowsA: true})
	}
	for mr := 1; mr <= 12; mr++ { // the bf16 kernels: the same tile, pairs of k per step
		kernel(tile{name: fmt.Sprintf("gemmBF16_%dx32", mr), mr: mr, nv: 2, lanes: 16, unroll: 4, masked: true, bf16: true})
	}
	kernel(tile{name: "gemmAVX2_6x16", mr: 6, nv: 2, lanes: 8, unroll: 4})
	transpose16("transposeAVX512_16x32", 16, 32)
	transpose16("transposeAVX512_12x12", 12, 12)
	copyPanels("copyPanelsAVX512_12", 12)
	copyPanels("copyPanelsAVX512_32", 32)
	fmaLoop("fmaLoopAVX512", 16, 24)
	fmaLoop("fmaLoopAVX2", 8, 12)
	dotLoop("dotLoopBF16", 24)
	pairRows("pairRows32")
	widen("widenF16", true)
	widen("widenBF16", false)
	Generate()
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
