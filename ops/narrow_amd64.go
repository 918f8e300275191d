//go:build amd64

package ops

// narrowBF16 rounds src[i] to bf16 bits in dst[i] for i < n (n a multiple
// of 16), as tensor.ToBF16 does. Needs AVX512F.
//
//go:noescape
func narrowBF16(dst *uint16, src *float32, n int)

// narrowF16 rounds src[i] to fp16 bits in dst[i] for i < n (n a multiple
// of 16), as tensor.ToF16 does. Needs AVX512F.
//
//go:noescape
func narrowF16(dst *uint16, src *float32, n int)
