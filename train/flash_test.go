package train

import (
	"math"
	"testing"
)

// TestFlashMatchesMaterialised trains 5 steps with flash=on and with the
// materialising attention (alone, under dp=2 and under ZeRO-3) and holds the losses
// within 1e-5 relative, and the measured act peak to the stash formula:
// flash keeps L·B·NH·T log-sum-exps where the other keeps L·B·NH·T²
// probabilities.
func TestFlashMatchesMaterialised(t *testing.T) {
	for _, base := range []string{"", "dp=2", "dp=2,zero=3"} {
		sep := ""
		if base != "" {
			sep = ","
		}
		j := tinyJob(base)
		j.Model.SeqLen = 200 // two query blocks of the flash kernel
		plain := runJob(t, j, "", "", 0)
		j.Parallel.Plan = base + sep + "flash=on"
		flash := runJob(t, j, "", "", 0)
		if len(plain.losses) != 5 || len(flash.losses) != 5 {
			t.Fatalf("%q: %d and %d steps logged, want 5", base, len(plain.losses), len(flash.losses))
		}
		for i, want := range plain.losses {
			if got := flash.losses[i]; !(math.Abs(got-want) <= 1e-5*math.Abs(want)) {
				t.Errorf("%q: step %d: flash loss %.9g, materialised %.9g (rel diff %.3g > 1e-5)", base, i+1, got, want, math.Abs(got-want)/math.Abs(want))
			}
		}
		c := j.Model
		B, NH, T := int64(j.Train.MicroBatch), int64(c.Heads), int64(c.SeqLen)
		wantSaved := int64(c.Layers) * B * NH * (T*T - T) * 4
		const act = 3 // RankStats.Peak index of tag act
		for r := range plain.sum.Ranks {
			p, f := plain.sum.Ranks[r].Peak[act], flash.sum.Ranks[r].Peak[act]
			if p-f != wantSaved {
				t.Errorf("%q rank %d: act peak %d B with flash, %d B without: saved %d, want L·B·NH·(T²−T)·4 = %d", base, r, f, p, p-f, wantSaved)
			}
			t.Logf("%q rank %d: act peak %d B materialised, %d B flash (%.2fx smaller)", base, r, p, f, float64(p)/float64(f))
		}
	}
}
