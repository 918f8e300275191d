package ops

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestPackers holds every impl's packing routines (the generated AVX-512
// ones included) to the definitions: packCopy's
// dst[q*w*rows + r*w + j] = src[r0+r, c0+q*w+j] and packTranspose's
// dst[c*w + r] = src[r0+r, c0+c], both zero-padded to the width w.
func TestPackers(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const ld, srcRows = 301, 80
	src := randSlice(r, ld*srcRows)
	for _, g := range append(archImpls(), genericImpl()) {
		for _, w := range []int{g.mr, g.nr} {
			// transpose: a panel of rows <= w rows of src, cols along K
			for _, sh := range [][2]int{{w, 16}, {w, 37}, {w, 64}, {w - 1, 33}, {1, 17}, {w, 1}, {3, 0}} {
				name := fmt.Sprintf("%s/w%d/transpose/%dx%d", g.name, w, sh[0], sh[1])
				checkTranspose(t, name, g.pack, src, ld, sh[0], sh[1], w)
			}
			// copy: rows along K, cols split into panels (more than packGroup)
			for _, sh := range [][2]int{{7, w}, {20, 3*w + 5}, {5, (packGroup + 1) * w}, {1, 1}, {0, w}, {4, 0}} {
				name := fmt.Sprintf("%s/w%d/copy/%dx%d", g.name, w, sh[0], sh[1])
				checkCopy(t, name, g.pack, src, ld, sh[0], sh[1], w)
			}
		}
	}
}

func checkTranspose(t *testing.T, name string, pk packer, src []float32, ld, rows, cols, w int) {
	t.Helper()
	const r0, c0 = 3, 5
	dst := make([]float32, cols*w+7)
	for i := range dst {
		dst[i] = -99 // stale
	}
	pk.transpose(src, ld, r0, c0, rows, cols, dst, w)
	for c := 0; c < cols; c++ {
		for r := 0; r < w; r++ {
			want := float32(0)
			if r < rows {
				want = src[(r0+r)*ld+c0+c]
			}
			if got := dst[c*w+r]; got != want {
				t.Fatalf("%s: transpose dst[%d*%d+%d] = %g, want %g", name, c, w, r, got, want)
			}
		}
	}
	for i := cols * w; i < len(dst); i++ {
		if dst[i] != -99 {
			t.Fatalf("%s: transpose wrote dst[%d] past the panel", name, i)
		}
	}
}

func checkCopy(t *testing.T, name string, pk packer, src []float32, ld, rows, cols, w int) {
	t.Helper()
	const r0, c0 = 2, 4
	np := (cols + w - 1) / w
	dst := make([]float32, np*w*rows+7)
	for i := range dst {
		dst[i] = -99
	}
	pk.copy(src, ld, r0, c0, rows, cols, dst, w)
	for q := 0; q < np; q++ {
		for r := 0; r < rows; r++ {
			for j := 0; j < w; j++ {
				want := float32(0)
				if q*w+j < cols {
					want = src[(r0+r)*ld+c0+q*w+j]
				}
				if got := dst[q*w*rows+r*w+j]; got != want {
					t.Fatalf("%s: copy panel %d [%d][%d] = %g, want %g", name, q, r, j, got, want)
				}
			}
		}
	}
	for i := np * w * rows; i < len(dst); i++ {
		if dst[i] != -99 {
			t.Fatalf("%s: copy wrote dst[%d] past the panels", name, i)
		}
	}
}
