package ops

import "golang.org/x/sys/cpu"

//go:generate go run ./avx2gen -out llama_amd64.s -stubs llama_stub_amd64.go -pkg ops

// haveAVX2 says whether the CPU (and OS) run the AVX2+FMA kernels of
// llama_amd64.s (SwiGLU, RMSNorm).
var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA
