//go:build !amd64

package ops

// narrowBF16 is never called off amd64 (haveAVX512 is false).
func narrowBF16(dst *uint16, src *float32, n int) { panic("ops: no AVX-512") }

// narrowF16 is never called off amd64 (haveAVX512 is false).
func narrowF16(dst *uint16, src *float32, n int) { panic("ops: no AVX-512") }
