package pp

import (
	"math/rand/v2"
	"testing"
)

// TestZBH1Makespan holds zb-h1's step at pp = 2 to its closed form. With
// passes F, B, W and a message delay d (Wire: Gap + Latency), where W ≥ 2d,
// F + 2d ≥ W and B + d ≥ W (every job the benchmarks run), the first rank
// waits B + 2d for its first gradient and F − W + 2d for its last, the
// last rank F + d for its first activation and 2d once more (the second
// forward's activation), and nothing else:
//
//	makespan = m(F+B+W) + (F + B − W) + 4d
//
// No schedule with 1F1B's memory (at most 2 micro-batches from F to W on a
// rank) does better than m(F+B+W) + (F + B − W) + 2d: the last rank starts
// at F + d at the earliest and, when its last B ends, has run all its F's
// and B's and all but at most 2 of its W's; the first rank's last B and W
// follow that B by d. Without the link zb-h1's bubble, F + B − W per
// rank, is then a third of 1F1B's F + B + W at F = B = W (Qi et al.'s
// premise; as fractions of the makespans (m+1)/(3m+1)), and 0.42 of it at
// the benchmark's measured F 10.5, B 11.0, W 8.8 ms, before the link, the
// stages' imbalance and the passes' jitter (docs/BENCHMARKS.md, "Bubble"). (1F1B, simulated the same way, also waits on the link in its
// steady state: (m+1)(F+B+W) + 2⌈m/2⌉·d.)
func TestZBH1Makespan(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 10))
	for trial := 0; trial < 200; trial++ {
		m := 3 + r.IntN(14)
		lat, gap := int64(r.IntN(50)), int64(r.IntN(50))
		d := lat + gap
		w := 2*d + int64(r.IntN(300))
		f := max(w-2*d, 0) + int64(r.IntN(300))
		b := max(w-d, 0) + int64(r.IntN(300))
		s, err := Build(Config{Kind: ZBH1, PP: 2, Micro: m})
		if err != nil {
			t.Fatal(err)
		}
		res, err := SimulateLink(s, func(_ int, a Action) int64 {
			switch a.Op {
			case Forward:
				return f
			case Backward:
				return b
			case Weight:
				return w
			}
			return 0
		}, Wire{Latency: lat, Gap: gap})
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(m)*(f+b+w) + f + b - w + 4*d; res.Makespan != want {
			t.Fatalf("m=%d F=%d B=%d W=%d d=%d (latency %d, gap %d): makespan %d, want m(F+B+W)+F+B−W+4d = %d",
				m, f, b, w, d, lat, gap, res.Makespan, want)
		}
	}
}
