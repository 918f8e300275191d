//go:build !amd64

package comm

// haveAVX512 is false off amd64: the vector kernels below are never called.
const haveAVX512 = false

func sum4F32AVX512(d, x0, x1, x2, x3 *float32, n int) { panic("comm: no AVX-512") }
func add4F32AVX512(d, x0, x1, x2, x3 *float32, n int) { panic("comm: no AVX-512") }
func scaleF32AVX512(d, x *float32, n int, s float32)  { panic("comm: no AVX-512") }
