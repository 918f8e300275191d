package comm

import "golang.org/x/sys/cpu"

//go:generate go run ./reducegen -out reduce_amd64.s -stubs reduce_stub_amd64.go -pkg comm

// haveAVX512 says whether the CPU (and OS) run the AVX-512 sum kernels of
// reduce_amd64.s.
var haveAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasBMI2
