//go:build amd64

#include "textflag.h"

// func narrowBF16(dst *uint16, src *float32, n int)
// Rounds n fp32 values (n a multiple of 16) to bf16, nearest even: per
// dword u, (u + 0x7fff + ((u >> 16) & 1)) >> 16, and for NaN (u | 0x400000)
// >> 16 (quiet, sign and top payload kept) — tensor.ToBF16, 16 lanes at a
// time. Written by hand (AVX512F only).
// Requires: AVX512F
TEXT ·narrowBF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	TESTQ CX, CX
	JLE narrow_done
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z4
	MOVL $1, AX
	VPBROADCASTD AX, Z5
	MOVL $0x00400000, AX
	VPBROADCASTD AX, Z6

narrow_loop:
	VMOVDQU32 (SI), Z0
	VPSRLD $16, Z0, Z1
	VPANDD Z5, Z1, Z1
	VPADDD Z4, Z1, Z1
	VPADDD Z1, Z0, Z2
	VCMPPS $3, Z0, Z0, K1
	VPORD Z6, Z0, K1, Z2
	VPSRLD $16, Z2, Z2
	VPMOVDW Z2, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNE narrow_loop

narrow_done:
	VZEROUPPER
	RET

// func narrowF16(dst *uint16, src *float32, n int)
// Rounds n fp32 values (n a multiple of 16) to fp16 with VCVTPS2PH,
// nearest even (imm 0), subnormals kept, NaN quiet with its sign and top
// payload: tensor.ToF16, 16 lanes at a time. Written by hand.
// Requires: AVX512F
TEXT ·narrowF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	TESTQ CX, CX
	JLE narrowf16_done

narrowf16_loop:
	VMOVUPS (SI), Z0
	VCVTPS2PH $0, Z0, Y1
	VMOVDQU Y1, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNE narrowf16_loop

narrowf16_done:
	VZEROUPPER
	RET
