//go:build !amd64

package ops

// haveAVX512 is false off amd64: the vector kernels below are never called.
const haveAVX512 = false

func geluFwdAVX512(out, x *float32, n int)                                  { panic("ops: no AVX-512") }
func geluBwdSetAVX512(dx, x, dy *float32, n int)                            { panic("ops: no AVX-512") }
func geluBwdAVX512(dx, x, dy *float32, n int)                               { panic("ops: no AVX-512") }
func axpyAVX512(y, x *float32, n int, a float32)                            { panic("ops: no AVX-512") }
func adamwAVX512(params, grads, mom, vel *float32, n int, c *float32)       { panic("ops: no AVX-512") }
func softmaxRowAVX512(out, in *float32, n int, scale float32, res *float32) { panic("ops: no AVX-512") }
func softmaxGradRowAVX512(d, p *float32, n int, scale float32)              { panic("ops: no AVX-512") }
func rowMaxAVX512(in *float32, n int, res *float32)                         { panic("ops: no AVX-512") }
func expRowAVX512(out, in *float32, n int, shift float32, res *float32)     { panic("ops: no AVX-512") }
func lnFwdRowsAVX512(out, x, w, b, mean, rstd *float32, n, rows int)        { panic("ops: no AVX-512") }
func lnBwdRowsAVX512(dx, dy, x, w, mean, rstd, dw, db *float32, n, rows int) {
	panic("ops: no AVX-512")
}
func lnBwdParamColsAVX512(dw, db, dy, x, mean, rstd *float32, n, rows, ld int) {
	panic("ops: no AVX-512")
}
func softmaxCausalAVX512(a *float32, ld, n0, rows int, scale float32) { panic("ops: no AVX-512") }
func softmaxGradCausalAVX512(d *float32, ldd int, p *float32, ldp, n0, rows int, scale float32) {
	panic("ops: no AVX-512")
}
func flashExpTileAVX512(s *float32, ld, n0, w, rows int, scale float32, mla *float32, band int) {
	panic("ops: no AVX-512")
}
func flashFinishAVX512(m, l *float32, rows int, lse, inv *float32) { panic("ops: no AVX-512") }
func flashGradDotTileAVX512(ds, s *float32, ld, n0, w, pad, rows int, scale float32, lse, d *float32) {
	panic("ops: no AVX-512")
}
func flashGradTileAVX512(ds, s *float32, ld, n0, w, pad, rows int, scale float32, lse, d *float32) {
	panic("ops: no AVX-512")
}
func rowDotsAVX512(out, x *float32, ldx int, y *float32, ldy, n, rows int) {
	panic("ops: no AVX-512")
}
func scaleRowsAVX512(x *float32, ld, n, rows int, a *float32) { panic("ops: no AVX-512") }
