package pp

import (
	"fmt"
	"math"
	"testing"
)

// DualPipeV, executed at pp = 2 and 4 (m = 2pp and more, a 9-layer model
// at pp = 4: 8 chunks), gives one device's loss and gradient (relative L2
// 1e-6, as the other schedules), with the tied head's two uses of unit 0
// on rank 0 summed there; each rank's act peak is the simulated 2pp+1
// stashes in flight plus its weight stashes between B and W.
func TestDualPipeVMatchesOneDevice(t *testing.T) {
	nine := tiny
	nine.Layers = 9
	for _, tc := range []struct {
		cfg string
		pp  int
		m   int
	}{{"L5", 2, 4}, {"L5", 2, 6}, {"L9", 4, 8}} {
		cfg := tiny
		if tc.cfg == "L9" {
			cfg = nine
		}
		t.Run(fmt.Sprintf("pp%d/m%d/%s", tc.pp, tc.m, tc.cfg), func(t *testing.T) {
			want, wantLoss := reference(t, cfg, tc.m)
			c := Config{Kind: DualPipeV, PP: tc.pp, Micro: tc.m}
			o := runPipeline(t, cfg, c)
			if math.Abs(o.loss-wantLoss) > 1e-6*wantLoss {
				t.Errorf("loss sum %.9g, one device %.9g", o.loss, wantLoss)
			}
			if e := relL2(o.grad, want); !(e < 1e-6) {
				t.Errorf("gradient relative L2 error %.3g", e)
			}
			for r, n := range o.sim.InFlight {
				if n != PeakInFlight(c, r) || o.sim.ChunkInFlight[r][0] != 2*tc.pp-r || o.sim.ChunkInFlight[r][1] != r+1 {
					t.Errorf("rank %d: %d in flight (%v per chunk), want 2pp+1 = %d (2pp−r, r+1)", r, n, o.sim.ChunkInFlight[r], PeakInFlight(c, r))
				}
			}
			checkAct(t, cfg, c, o)
		})
	}
}

// The V places stage r and 2pp−1−r on rank r: the first and last stage on
// rank 0 (one copy of a tied head's unit 0, no tied group), the turn
// between stages pp−1 and pp on rank pp−1 without a message.
func TestDualPipeVLayout(t *testing.T) {
	const p = 4
	nine := tiny
	nine.Layers = 9
	for r := 0; r < p; r++ {
		l, err := NewLayoutFor(nine, DualPipeV, p, 1, r)
		if err != nil {
			t.Fatal(err)
		}
		pl := l.Placement()
		if l.VPP != 2 || pl.Stage(r, 0) != r || pl.Stage(r, 1) != 2*p-1-r {
			t.Fatalf("rank %d: vpp %d, stages %d and %d", r, l.VPP, pl.Stage(r, 0), pl.Stage(r, 1))
		}
		if l.First() != (r == 0) || l.Last() != (r == 0) || l.TiedAcross() {
			t.Errorf("rank %d: first %v last %v tied across %v", r, l.First(), l.Last(), l.TiedAcross())
		}
		_, next := pl.Neighbours(r, 0)
		if next.Local(r) != (r == p-1) {
			t.Errorf("rank %d: chunk 0's next stage %+v", r, next)
		}
	}
	s, err := Build(Config{Kind: DualPipeV, PP: p, Micro: 2 * p})
	if err != nil {
		t.Fatal(err)
	}
	for r, acts := range s.Ranks {
		for _, a := range acts {
			if !a.Op.Compute() && a.Peer == r {
				t.Errorf("rank %d: %v is a message to itself", r, a)
			}
		}
	}
}

// DualPipeV's bubble against 1F1B's and zb-h1's at the same pp and m,
// each priced in the same work: a DualPipeV chunk is half a 1F1B stage, so
// its passes cost F = B = W = 1 where 1F1B's and zb-h1's cost 2. At pp = 4,
// m = 8 the bubbles are 1F1B 27.3%, zb-h1 11.1%, DualPipeV 5.9%.
func TestDualPipeVBubble(t *testing.T) {
	for _, p := range []int{2, 4, 8} {
		for _, m := range []int{2 * p, 4 * p} {
			bub := map[Kind]float64{}
			span := map[Kind]int64{}
			for _, k := range []Kind{OneFOneB, ZBH1, DualPipeV} {
				s, err := Build(Config{Kind: k, PP: p, Micro: m})
				if err != nil {
					t.Fatal(err)
				}
				c := Costs{F: 2, B: 2, W: 2}
				if k == DualPipeV {
					c = Unit
				}
				res, err := Simulate(s, c)
				if err != nil {
					t.Fatal(err)
				}
				bub[k], span[k] = res.Bubble(), res.Makespan
			}
			t.Logf("pp=%d m=%d: bubble 1f1b %.4f (%d), zb-h1 %.4f (%d), dualpipev %.4f (%d)", p, m,
				bub[OneFOneB], span[OneFOneB], bub[ZBH1], span[ZBH1], bub[DualPipeV], span[DualPipeV])
			if want := int64(6*m + 6*(p-1)); span[OneFOneB] != want {
				t.Errorf("pp=%d m=%d: 1f1b makespan %d, want %d", p, m, span[OneFOneB], want)
			}
			if want := int64(6*m + (p - 1)); span[DualPipeV] != want {
				t.Errorf("pp=%d m=%d: dualpipev makespan %d, want 6m + (p−1)F = %d", p, m, span[DualPipeV], want)
			}
			if !(bub[DualPipeV] < bub[ZBH1] && bub[ZBH1] < bub[OneFOneB]) {
				t.Errorf("pp=%d m=%d: bubbles %v, want dualpipev < zb-h1 < 1f1b", p, m, bub)
			}
		}
	}
}
