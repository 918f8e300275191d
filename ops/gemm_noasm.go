//go:build !amd64

package ops

// archImpls returns no assembly micro-kernels: only amd64 has them.
func archImpls() []*gemmImpl { return nil }
