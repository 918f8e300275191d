//go:build !amd64

package ops

// edgeKernels16 returns nil: only amd64 has assembly micro-kernels.
func edgeKernels16(im *gemmImpl) []microKernel { return nil }
