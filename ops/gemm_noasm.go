//go:build !amd64

package ops

// archImpls returns no assembly micro-kernels: only amd64 has them.
func archImpls() []*gemmImpl { return nil }

// bf16Impl returns no VDPBF16PS kernels: only amd64 has them.
func bf16Impl(g *gemmImpl) (*gemmImpl, string) { return nil, "no bf16 kernels on this architecture" }
