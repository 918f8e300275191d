//go:build !amd64

package ops

// archImpls returns no assembly micro-kernels: only amd64 has them.
func archImpls() []*gemmImpl { return nil }

// bf16Impl returns no VDPBF16PS kernels: only amd64 has them.
func bf16Impl(g *gemmImpl) (*gemmImpl, string) { return nil, "no bf16 kernels on this architecture" }

// pairRows32 is never called off amd64 (haveAVX512 is false).
func pairRows32(src *uint16, ld int, dst *float32, steps int) { panic("ops: no AVX-512") }
func widenF16(dst *float32, src *uint16, n int)               { panic("ops: no AVX-512") }
func widenBF16(dst *float32, src *uint16, n int)              { panic("ops: no AVX-512") }
