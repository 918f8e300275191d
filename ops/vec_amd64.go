package ops

import "golang.org/x/sys/cpu"

//go:generate go run ./vecgen -out vec_amd64.s -stubs vec_stub_amd64.go -pkg ops

// haveAVX512 says whether the CPU (and OS) run the AVX-512 vector kernels
// of vec_amd64.s.
var haveAVX512 = cpu.X86.HasAVX512F
