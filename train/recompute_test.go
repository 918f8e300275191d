package train

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"trellis/device"
	"trellis/parallel/pp"
	"trellis/plan"
)

// rcFormula is the per-rank act peak docs/ARCHITECTURE.md states under
// recomputation for a tensor-parallel degree t (1: none), in bytes, with
// the notation of actFormula and A = a·b·s²/t (a·b·s/t with flash):
//
//	none       4·(L·(4nh + 4n + 12bsh/t + A) + head)
//	selective  4·(L·(4nh + 4n + 12bsh/t) + A + head)          (flash: as none)
//	full       4·(L·nh + (3nh + 4n + 12bsh/t + A) + head)
//
// head = 2nh + 2n + bs·V' + bs, plus 16·bs of token ids.
func rcFormula(j Job, t int, sp, flash bool, rc string) int64 {
	c := j.Model
	s, b, h, a, L := int64(c.SeqLen), int64(j.Train.MicroBatch), int64(c.Hidden), int64(c.Heads), int64(c.Layers)
	T := int64(t)
	bs := b * s
	n := bs
	if sp {
		n = bs / T
	}
	A := a * b * s * s / T
	if flash {
		A = a * b * s / T
	}
	vl := (int64(c.Vocab) + T - 1) / T
	head := 2*n*h + 2*n + bs*vl + bs
	inner := 3*n*h + 4*n + 12*bs*h/T // a layer's activations but its input and A
	var layers int64
	switch {
	case rc == "full":
		layers = L*n*h + inner + A
	case rc == "selective" && !flash:
		layers = L*(n*h+inner) + A
	default:
		layers = L * (n*h + inner + A)
	}
	return 4*(layers+head) + 16*bs
}

// Recomputation (selective, full) under dp, ZeRO 0–3, tp=2 (± sp) and
// pp=2 (1f1b and zb-h1, whose deferred weight pass recomputes again),
// with dropout on (flash on too under ZeRO-3), trains bit-identically to no
// recomputation over 5 steps: every step's loss and gradient norm equal.
// Outside pipelines every rank's act peak equals rcFormula, and so does
// the planner's prediction for the CPU host cluster file; under 1f1b it
// is the micro-batches in flight times rcStageBytes.
func TestRecomputeBitIdentical(t *testing.T) {
	for _, tc := range []struct {
		plan string
		t    int
	}{
		{"dp=2,zero=0", 1}, {"dp=2,zero=1", 1}, {"dp=2,zero=2", 1}, {"dp=2,zero=3", 1},
		{"tp=2", 2}, {"tp=2,sp=on", 2}, {"pp=2,schedule=1f1b", 1}, {"pp=2,schedule=zb-h1", 1},
	} {
		for _, flash := range []string{"off", "on"} {
			if flash == "on" && tc.plan != "dp=2,zero=3" {
				continue
			}
			base := tc.plan + ",flash=" + flash
			mk := func(rc string) Job {
				j := tpJob(base+",recompute="+rc, 0.1)
				if strings.HasPrefix(tc.plan, "pp") {
					j.Model.Layers = 3
				}
				return j
			}
			ref := runJob(t, mk("none"), "", "", 0)
			if len(ref.losses) != 5 {
				t.Fatalf("%s: %d steps logged, want 5", base, len(ref.losses))
			}
			for _, rc := range []string{"none", "selective", "full"} {
				t.Run(fmt.Sprintf("%s/recompute=%s", base, rc), func(t *testing.T) {
					j := mk(rc)
					got := ref
					if rc != "none" {
						got = runJob(t, j, "", "", 0)
					}
					if !slices.Equal(got.losses, ref.losses) || !slices.Equal(got.norms, ref.norms) {
						t.Errorf("losses %v norms %v, without recomputation %v %v", got.losses, got.norms, ref.losses, ref.norms)
					}
					if tc.plan == "pp=2,schedule=1f1b" {
						checkStageAct(t, j, got, rc)
					}
					if strings.HasPrefix(tc.plan, "pp") {
						return
					}
					want := rcFormula(j, tc.t, strings.Contains(tc.plan, "sp=on"), flash == "on", rc)
					if p := plannedAct(t, j); p != want {
						t.Errorf("the planner predicts act %d bytes, the formula %d", p, want)
					}
					for _, r := range got.sum.Ranks {
						if a := r.Peak[device.Act]; a != want {
							t.Errorf("rank %d: act peak %d bytes, formula %d", r.Rank, a, want)
						}
					}
				})
			}
		}
	}
}

// rcStageBytes is a pipeline stage's stash for blocks [lo, hi) under
// recomputation rc: stashBytes with the n layers' activations
// n·(15·BTC + 4·BT + A) replaced by n·(…) − (n−1)·A for selective and one
// layer's for full.
func rcStageBytes(j Job, lo, hi int, head bool, rc string) int64 {
	c := j.Model
	B, T, C := int64(j.Train.MicroBatch), int64(c.SeqLen), int64(c.Hidden)
	BT, BTC, A := B*T, B*T*C, B*int64(c.Heads)*T*T
	n := int64(hi - lo)
	layer := 15*BTC + 4*BT + A
	layers := n * layer
	switch {
	case n == 0:
	case rc == "full":
		layers = layer
	case rc == "selective":
		layers = n*(layer-A) + A
	}
	f := (n+1)*BTC + layers
	if head {
		f += BTC + 2*BT + BT*int64(c.Vocab) + BT
	}
	return f*4 + 2*BT*4
}

// checkStageAct holds each rank of a pp=2 1f1b run to its peak in-flight
// micro-batches times its stage stash, plus the rank's token ids.
func checkStageAct(t *testing.T, j Job, got result, rc string) {
	t.Helper()
	c := pp.Config{Kind: pp.OneFOneB, PP: 2, VPP: 1, Micro: j.Train.GlobalBatch / j.Train.MicroBatch}
	counts, err := plan.ChunkLayers(j.Model.Layers, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	BT := int64(j.Train.MicroBatch * j.Model.SeqLen)
	for _, rs := range got.sum.Ranks {
		r := rs.Rank
		lo := 0
		for st := 0; st < r; st++ {
			lo += counts[st]
		}
		want := 8*BT + int64(pp.PeakInFlight(c, r))*rcStageBytes(j, lo, lo+counts[r], r == 1, rc)
		if a := rs.Peak[device.Act]; a != want {
			t.Errorf("rank %d: act peak %d bytes, want %d", r, a, want)
		}
	}
}

// The run log says that selective recomputation under flash is flash's
// own behaviour, and says nothing for the other combinations.
func TestRecomputeNote(t *testing.T) {
	for _, tc := range []struct {
		plan string
		note bool
	}{{"recompute=selective,flash=on", true}, {"recompute=selective", false}, {"recompute=full,flash=on", false}, {"flash=on", false}} {
		p, err := tinyJob(tc.plan).EnginePlan()
		if err != nil {
			t.Fatal(err)
		}
		if got := recomputeNote(p) != ""; got != tc.note {
			t.Errorf("%s: note %q, want one: %v", tc.plan, recomputeNote(p), tc.note)
		}
	}
}
