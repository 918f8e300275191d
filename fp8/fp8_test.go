package fp8

import (
	"math"
	"testing"

	"trellis/tensor"
)

func exact(f Format, x float32) float32 {
	if f == E5M2 {
		return tensor.ToE5M2(x).Float32()
	}
	return tensor.ToE4M3(x).Float32()
}

func xorshift(n int, seed uint32, lo, hi int) []float32 {
	out := make([]float32, n)
	r := seed
	for i := range out {
		r ^= r << 13
		r ^= r >> 17
		r ^= r << 5
		v := float32(math.Ldexp(1+float64(r>>8)/(1<<24), int(r%uint32(hi-lo))+lo))
		if r&1 == 1 {
			v = -v
		}
		out[i] = v
	}
	return out
}

// Round is tensor's encode-then-decode on every code, every midpoint
// between codes, one ulp around each and random values over both
// formats' ranges and beyond.
func TestRoundIsEncodeDecode(t *testing.T) {
	for _, f := range []Format{E4M3, E5M2} {
		xs := xorshift(50000, 99, -30, 20)
		for c := 0; c < 256; c++ {
			var v float32
			if f == E5M2 {
				v = tensor.E5M2(c).Float32()
			} else {
				v = tensor.E4M3(c).Float32()
			}
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				continue
			}
			next := math.Nextafter32(v, float32(math.Inf(1)))
			xs = append(xs, v, next, math.Nextafter32(v, float32(math.Inf(-1))))
		}
		for i, n := 0, len(xs); i < n; i++ { // midpoints of neighbouring codes among the samples
			if a, b := exact(f, xs[i]), exact(f, xs[i]*1.01); a != b {
				xs = append(xs, (a+b)/2)
			}
		}
		xs = append(xs, float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)))
		for _, x := range xs {
			if got, want := f.Round(x), exact(f, x); math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s: Round(%g) = %g, encode/decode %g", f, x, got, want)
			}
		}
		if !math.IsNaN(float64(f.Round(float32(math.NaN())))) {
			t.Errorf("%s: NaN does not stay NaN", f)
		}
	}
}

// Scale is the largest power of two s with amax·s ≤ max (over 2^margin).
func TestScale(t *testing.T) {
	for _, f := range []Format{E4M3, E5M2} {
		for _, a := range xorshift(2000, 7, -20, 20) {
			a = abs32(a)
			for _, margin := range []int{0, 1, 3} {
				s := Scale(f, a, margin)
				fr, _ := math.Frexp(float64(s))
				top := float64(s) * math.Ldexp(1, margin)
				if fr != 0.5 || float64(a)*top > float64(f.Max()) || float64(a)*top*2 <= float64(f.Max()) {
					t.Fatalf("%s: Scale(%g, margin %d) = %g", f, a, margin, s)
				}
			}
		}
		if Scale(f, 0, 0) != 1 || Scale(f, float32(math.Inf(1)), 0) != 1 || Scale(f, float32(math.NaN()), 0) != 1 {
			t.Errorf("%s: the scale of 0, Inf or NaN is not 1", f)
		}
	}
}

// refQuant is Quantise written element by element from each element's
// tile.
func refQuant(src []float32, rows, cols int, tile Tile, f Format, scale float32) []float32 {
	out := make([]float32, len(src))
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			s := scale
			if s == 0 {
				ti, tj := i/tile.R*tile.R, j/tile.C*tile.C
				a := float32(0)
				for ii := ti; ii < min(rows, ti+tile.R); ii++ {
					for jj := tj; jj < min(cols, tj+tile.C); jj++ {
						a = max(a, float32(math.Abs(float64(src[ii*cols+jj]))))
					}
				}
				s = Scale(f, a, 0)
			}
			out[i*cols+j] = exact(f, src[i*cols+j]*s) / s
		}
	}
	return out
}

// Quantise equals the element-by-element reference for 1×C, R×1, R×C and
// whole-matrix tiles (with ragged edges), from fp32 and from bf16, and
// its values are dequantised fp8 codes held exactly in bf16.
func TestQuantiseTiles(t *testing.T) {
	rows, cols := 37, 45
	src := xorshift(rows*cols, 3, -12, 4)
	for i := 0; i < cols; i++ { // one column far larger: per-tile scales must differ from per-tensor
		src[5*cols+i] *= 4096
	}
	half := make([]uint16, len(src))
	for i, v := range src {
		half[i] = uint16(tensor.ToBF16(v))
		src[i] = tensor.BF16Bits(half[i]).Float32()
	}
	dst := make([]uint16, len(src))
	tmp := make([]float32, TmpLen(cols))
	for _, f := range []Format{E4M3, E5M2} {
		for _, c := range []struct {
			tile  Tile
			scale float32
		}{{Tile{1, 8}, 0}, {Tile{8, 1}, 0}, {Tile{8, 8}, 0}, {Tile{rows, cols}, 0}, {Tile{rows, cols}, 4}, {Tile{1, 16}, 0.25}} {
			for _, in := range []tensor.Buf{tensor.F32s(src), tensor.Halves(tensor.BF16, half)} {
				amax := Quantise(dst, in, rows, cols, c.tile, f, c.scale, tmp)
				want := refQuant(src, rows, cols, c.tile, f, c.scale)
				if amax != 4096*maxAbs(src[5*cols:6*cols])/4096 {
					t.Errorf("amax %g", amax)
				}
				for i, w := range want {
					if got := tensor.BF16Bits(dst[i]).Float32(); got != w {
						t.Fatalf("%s %+v %s: element %d = %g, want %g", f, c.tile, in.DType(), i, got, w)
					}
				}
			}
		}
	}
}

func maxAbs(x []float32) float32 {
	a := float32(0)
	for _, v := range x {
		a = max(a, abs32(v))
	}
	return a
}

// The scale of a step is made from the largest amax of the last H steps.
func TestHistory(t *testing.T) {
	h := NewHistory(E4M3, 1, make([]float32, Len(3)))
	if h.Scale() != 1 {
		t.Fatalf("first scale %g", h.Scale())
	}
	for i, step := range [][]float32{{2, 1}, {0.5}, {0.25, 0.1}, {0.25}, {0.125}} {
		for _, a := range step {
			h.Observe(a)
		}
		h.Roll()
		wantAmax := []float32{2, 2, 2, 0.5, 0.25}[i]
		if want := Scale(E4M3, wantAmax, 1); h.Scale() != want {
			t.Errorf("after step %d: scale %g, want %g (amax %g)", i, h.Scale(), want, wantAmax)
		}
	}
}

// A history saved after its ring has wrapped and loaded into a fresh one
// continues it bit for bit (the same scales and saved state at every
// later step); loaded into a shorter one it keeps the newest amaxes and
// remakes the scale from them.
func TestHistorySaveLoad(t *testing.T) {
	const H = 3
	a := NewHistory(E5M2, 1, make([]float32, Len(H)))
	amaxes := []float32{3, 0.5, 7, 0.25, 1.5, 40, 0.125, 2}
	for _, v := range amaxes[:5] {
		a.Observe(v)
		a.Roll()
	}
	saved := make([]float32, H)
	sc := a.Save(saved)
	if saved[0] != 7 || saved[1] != 0.25 || saved[2] != 1.5 {
		t.Fatalf("saved %v, want [7 0.25 1.5] (oldest first)", saved)
	}
	b := NewHistory(E5M2, 1, make([]float32, Len(H)))
	b.Load(saved, sc, a.Steps())
	for _, v := range amaxes[5:] {
		if a.Scale() != b.Scale() || a.Recorded() != b.Recorded() {
			t.Fatalf("scales %v and %v", a.Scale(), b.Scale())
		}
		a.Observe(v)
		b.Observe(v)
		a.Roll()
		b.Roll()
	}
	x, y := make([]float32, H), make([]float32, H)
	if a.Save(x) != b.Save(y) || x[0] != y[0] || x[1] != y[1] || x[2] != y[2] {
		t.Fatalf("after 3 more steps: %v and %v", x, y)
	}
	c := NewHistory(E5M2, 1, make([]float32, Len(2)))
	c.Load(saved, sc, 5)
	got := make([]float32, 2)
	if c.Save(got); got[0] != 0.25 || got[1] != 1.5 || c.Scale() != Scale(E5M2, 1.5, 1) {
		t.Fatalf("shortened: %v scale %v, want [0.25 1.5] and %v", got, c.Scale(), Scale(E5M2, 1.5, 1))
	}
}
