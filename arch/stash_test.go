package arch

import "testing"

// TestStashElemsFormula holds the declarations' sums to the stash formula
// the engine used before them (model/stash.go, stash16.go and
// recompute.go at ed1cb48), with n = B·T (B·T/t with sp), C' = C/t,
// F = 4C/t, NH' = NH/t, V' = ⌈V/t⌉ and A = B·NH'·T² (B·NH'·T with flash):
//
//	fp32    (k+1)·nC + layers(3nC + 4n + 4·BTC' + 2·BTF + A) [+ nC + 2n + BTV' + BT]
//	16-bit  fp32 (k+1)·nC + layers(nC + 4n + A) [+ 2n + BTV' + BT],
//	        16-bit layers(2nC + 4·BTC' + 2·BTF) [+ nC]
//
// layers(x): k·x, or x once under full recomputation, and with selective
// (materialised probabilities) k·(x − A) + A.
func TestStashElemsFormula(t *testing.T) {
	c := Config{Layers: 5, Hidden: 96, Heads: 6, SeqLen: 32, Vocab: 259}
	for _, tp := range []int{1, 2, 3} {
		for _, sp := range []bool{false, true} {
			if sp && (tp == 1 || c.SeqLen%tp != 0) {
				continue
			}
			for _, flash := range []bool{false, true} {
				for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
					for _, half := range []bool{false, true} {
						for _, k := range []int{0, 1, 3} {
							for _, head := range []bool{false, true} {
								d := Dims{B: 2, T: c.SeqLen, Part: Part{TP: tp, SP: sp}, Flash: flash, Recompute: rc}
								got, want := c.StageStash(d, k, head, half), oldStash(c, d, k, head, half)
								if got != want {
									t.Errorf("tp=%d sp=%v flash=%v %v half=%v k=%d head=%v: %+v, want %+v", tp, sp, flash, rc, half, k, head, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
}

func oldStash(c Config, d Dims, k int, head, half bool) Elems {
	t := d.Part.Degree()
	B, T, C := d.B, d.T, c.Hidden
	BT := B * T
	n := d.Tokens()
	Cl, F, NH, V := C/t, 4*C/t, c.Heads/t, (c.Vocab+t-1)/t
	A := B * NH * T * T
	if d.Flash {
		A = B * NH * T
	}
	lf := 3*n*C + 4*n + 4*BT*Cl + 2*BT*F + A
	lh := 0
	if half {
		lf, lh = n*C+4*n+A, 2*n*C+4*BT*Cl+2*BT*F
	}
	layers := func(x, a int) int {
		switch {
		case k == 0:
			return 0
		case d.Recompute == RecomputeFull:
			return x
		case d.Recompute == RecomputeSelective && !d.Flash:
			return k*(x-a) + a
		}
		return k * x
	}
	f32, h := (k+1)*n*C+layers(lf, A), layers(lh, 0)
	if head {
		f32 += 2*n + BT*V + BT
		if half {
			h += n * C
		} else {
			f32 += n * C
		}
	}
	return Elems{F32: float64(f32), Half: float64(h)}
}
