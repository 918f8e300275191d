package ops

// LayerNorm row primitives of the pure-Go path; vecgen's lnFwdRows,
// lnBwdRows and lnBwdParamCols are the AVX-512 one.

// lnOutRow sets out[i] = (x[i]−m)·s·w[i] + b[i].
func lnOutRow(out, x, w, b []float32, m, s float32) {
	x, w, b = x[:len(out)], w[:len(out)], b[:len(out)]
	for i := range out {
		out[i] = (x[i]-m)*s*w[i] + b[i]
	}
}

// lnBwdSumsRow returns Σ g[i] and Σ g[i]·x̂[i] with g = w⊙dy, x̂ = (x−m)·s.
func lnBwdSumsRow(dy, x, w []float32, m, s float32) (g, gx float32) {
	x, w = x[:len(dy)], w[:len(dy)]
	for i := range dy {
		gi := w[i] * dy[i]
		g += gi
		gx += gi * (x[i] - m) * s
	}
	return g, gx
}

// lnBwdDxRow sets dx[i] += s·(w[i]·dy[i] − g − x̂[i]·gx).
func lnBwdDxRow(dx, dy, x, w []float32, m, s, g, gx float32) {
	dy, x, w = dy[:len(dx)], x[:len(dx)], w[:len(dx)]
	for i := range dx {
		xh := (x[i] - m) * s
		dx[i] += s * (w[i]*dy[i] - g - xh*gx)
	}
}

// lnBwdParamsRow sets dw[i] += dy[i]·x̂[i] and db[i] += dy[i].
func lnBwdParamsRow(dw, db, dy, x []float32, m, s float32) {
	db, dy, x = db[:len(dw)], dy[:len(dw)], x[:len(dw)]
	for i := range dw {
		dw[i] += dy[i] * (x[i] - m) * s
		db[i] += dy[i]
	}
}
