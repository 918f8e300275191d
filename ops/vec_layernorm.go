package ops

// LayerNorm row primitives; see vec.go.

// lnOutRow sets out[i] = (x[i]−m)·s·w[i] + b[i].
func lnOutRow(v bool, out, x, w, b []float32, m, s float32) {
	x, w, b = x[:len(out)], w[:len(out)], b[:len(out)]
	n := vecLen(v, len(out))
	if n > 0 {
		lnOutAVX512(&out[0], &x[0], &w[0], &b[0], n, m, s)
	}
	for i := n; i < len(out); i++ {
		out[i] = (x[i]-m)*s*w[i] + b[i]
	}
}

// lnBwdSumsRow returns Σ g[i] and Σ g[i]·x̂[i] with g = w⊙dy, x̂ = (x−m)·s.
func lnBwdSumsRow(v bool, dy, x, w []float32, m, s float32) (g, gx float32) {
	x, w = x[:len(dy)], w[:len(dy)]
	n := vecLen(v, len(dy))
	if n > 0 {
		var l [32]float32
		lnBwdSumsAVX512(&dy[0], &x[0], &w[0], n, m, s, &l[0])
		g, gx = lanes16((*[16]float32)(l[:16])), lanes16((*[16]float32)(l[16:]))
	}
	for i := n; i < len(dy); i++ {
		gi := w[i] * dy[i]
		g += gi
		gx += gi * (x[i] - m) * s
	}
	return g, gx
}

// lnBwdDxRow sets dx[i] += s·(w[i]·dy[i] − g − x̂[i]·gx).
func lnBwdDxRow(v bool, dx, dy, x, w []float32, m, s, g, gx float32) {
	dy, x, w = dy[:len(dx)], x[:len(dx)], w[:len(dx)]
	n := vecLen(v, len(dx))
	if n > 0 {
		lnBwdDxAVX512(&dx[0], &dy[0], &x[0], &w[0], n, m, s, g, gx)
	}
	for i := n; i < len(dx); i++ {
		xh := (x[i] - m) * s
		dx[i] += s * (w[i]*dy[i] - g - xh*gx)
	}
}

// lnBwdParamsRow sets dw[i] += dy[i]·x̂[i] and db[i] += dy[i].
func lnBwdParamsRow(v bool, dw, db, dy, x []float32, m, s float32) {
	db, dy, x = db[:len(dw)], dy[:len(dw)], x[:len(dw)]
	n := vecLen(v, len(dw))
	if n > 0 {
		lnBwdParamsAVX512(&dw[0], &db[0], &dy[0], &x[0], n, m, s)
	}
	for i := n; i < len(dw); i++ {
		dw[i] += dy[i] * (x[i] - m) * s
		db[i] += dy[i]
	}
}
