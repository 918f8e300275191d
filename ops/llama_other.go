//go:build !amd64

package ops

// haveAVX2 is false: only amd64 has the assembly kernels.
const haveAVX2 = false

func swigluFwdAVX2(act, gate, up *float32, n int)           { panic("ops: no AVX2 kernels") }
func swigluBwdAVX2(dg, du, gate, up, dact *float32, n int)  { panic("ops: no AVX2 kernels") }
func rmsDotAVX2(w, dy, x *float32, n int) float32           { panic("ops: no AVX2 kernels") }
func rmsScaleAVX2(out, x, w *float32, n int, s float32)     { panic("ops: no AVX2 kernels") }
func rmsBwdAVX2(dx, w, dy, x *float32, n int, s, c float32) { panic("ops: no AVX2 kernels") }
func rmsParamAVX2(dw, dy, x *float32, n int, s float32)     { panic("ops: no AVX2 kernels") }
func geluFwdAVX2(out, x *float32, n int)                    { panic("ops: no AVX2 kernels") }
func geluBwdAVX2(dx, x, dy *float32, n int)                 { panic("ops: no AVX2 kernels") }
func geluBwdSetAVX2(dx, x, dy *float32, n int)              { panic("ops: no AVX2 kernels") }
