package ops

// packABlock packs rows [i0, i0+rows) and depth [p0, p0+kc) of op(A) into
// ceil(rows/mr) micro-panels of kc×mr floats: dst[q*mr*kc + p*mr + i] =
// op(A)[i0+q*mr+i, p0+p], zero past the last row. op(A) is A for NN and
// NT (A stored (M,K)) and Aᵀ for TN (A stored (K,M)).
func packABlock(l Layout, a []float32, lda, i0, rows, p0, kc int, dst []float32, mr int, pk packer) {
	if l == TN {
		pk.copy(a, lda, p0, i0, kc, rows, dst, mr)
		return
	}
	for q := 0; q*mr < rows; q++ {
		pk.transpose(a, lda, i0+q*mr, p0, min(mr, rows-q*mr), kc, dst[q*mr*kc:(q+1)*mr*kc], mr)
	}
}

// packBPanels packs depth [p0, p0+kc) and columns [j0, j0+cols) of op(B)
// into ceil(cols/nr) micro-panels of kc×nr floats: dst[q*nr*kc + p*nr + j]
// = op(B)[p0+p, j0+q*nr+j], zero past the last column. op(B) is B for NN
// and TN (B stored (K,N)) and Bᵀ for NT (B stored (N,K)).
func packBPanels(l Layout, b []float32, ldb, p0, kc, j0, cols int, dst []float32, nr int, pk packer) {
	if l != NT {
		pk.copy(b, ldb, p0, j0, kc, cols, dst, nr)
		return
	}
	for q := 0; q*nr < cols; q++ {
		pk.transpose(b, ldb, j0+q*nr, p0, min(nr, cols-q*nr), kc, dst[q*nr*kc:(q+1)*nr*kc], nr)
	}
}

// packer holds a gemmImpl's two ways of packing, both with the contract of
// packCopy and packTranspose (which are the pure-Go ones).
type packer struct {
	copy      func(src []float32, ld, r0, c0, rows, cols int, dst []float32, w int)
	transpose func(src []float32, ld, r0, c0, rows, cols int, dst []float32, w int)
}

// packCopy packs the (rows, cols) block of src at (r0, c0) into
// ceil(cols/w) panels of rows×w floats: dst[q*w*rows + r*w + j] =
// src[r0+r, c0+q*w+j], zero past the last column (those lanes only reach
// discarded parts of edge tiles; zeros keep stale bits, such as denormals,
// out of the FMAs). It walks src row by row
// through groups of packGroup panels, so reads stream through memory
// whatever the stride and writes stay in a few streams.
func packCopy(src []float32, ld, r0, c0, rows, cols int, dst []float32, w int) {
	np := (cols + w - 1) / w
	for q0 := 0; q0 < np; q0 += packGroup {
		q1 := min(np, q0+packGroup)
		full := min(q1, cols/w) // panels [q0, full) are full
		for r := 0; r < rows; r++ {
			s := src[(r0+r)*ld+c0 : (r0+r)*ld+c0+cols]
			copyRow(dst, s, rows, r, q0, full, w)
			if full < q1 {
				d := dst[full*w*rows+r*w : full*w*rows+r*w+w]
				copy(d, s[full*w:])
				clear(d[cols-full*w:])
			}
		}
	}
}

// packGroup is how many panels packCopy fills row by row together.
const packGroup = 8

// copyRow copies s[q*w : q*w+w] to row r of panel q (of rows×w floats) in
// dst, for panels [q0, q1).
func copyRow(dst, s []float32, rows, r, q0, q1, w int) {
	switch w { // fixed-size copies instead of memmove calls
	case 32:
		for q := q0; q < q1; q++ {
			*(*[32]float32)(dst[q*32*rows+r*32:]) = *(*[32]float32)(s[q*32:])
		}
	case 16:
		for q := q0; q < q1; q++ {
			*(*[16]float32)(dst[q*16*rows+r*16:]) = *(*[16]float32)(s[q*16:])
		}
	case 12:
		for q := q0; q < q1; q++ {
			*(*[12]float32)(dst[q*12*rows+r*12:]) = *(*[12]float32)(s[q*12:])
		}
	default:
		for q := q0; q < q1; q++ {
			copy(dst[q*w*rows+r*w:q*w*rows+r*w+w], s[q*w:])
		}
	}
}

// packTranspose writes the transpose of the (rows, cols) block of src at
// (r0, c0) into dst with row stride w >= rows: dst[c*w + r] = src[r0+r,
// c0+c], zeroing entries r in [rows, w).
func packTranspose(src []float32, ld, r0, c0, rows, cols int, dst []float32, w int) {
	dst = dst[:cols*w]
	r := 0
	for ; r+4 <= rows; r += 4 {
		s0 := src[(r0+r)*ld+c0 : (r0+r)*ld+c0+cols]
		s1 := src[(r0+r+1)*ld+c0 : (r0+r+1)*ld+c0+cols]
		s2 := src[(r0+r+2)*ld+c0 : (r0+r+2)*ld+c0+cols]
		s3 := src[(r0+r+3)*ld+c0 : (r0+r+3)*ld+c0+cols]
		for c := range s0 {
			d := dst[c*w+r : c*w+r+4]
			d[0], d[1], d[2], d[3] = s0[c], s1[c], s2[c], s3[c]
		}
	}
	for ; r < rows; r++ {
		s := src[(r0+r)*ld+c0 : (r0+r)*ld+c0+cols]
		for c, v := range s {
			dst[c*w+r] = v
		}
	}
	if rows < w {
		for c := 0; c < cols; c++ {
			clear(dst[c*w+rows : c*w+w])
		}
	}
}
